"""What every sensor type shares: its registration with a sample that configures it, the
`edge-agent sensors` listing, and the device nodes the unit allows. Each sensor's own tests sit
beside it (edge_agent/sensors/<type>/test_<type>.py)."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from edge_agent.config import ConfigError, parse
from edge_agent.sensors import build, device_nodes, sensor_types


def test_every_registered_sensor_type_has_a_sample_that_configures_it() -> None:
    """Each sensor module registers itself with a sample [[sensors]] table: the samples parse."""
    types = sensor_types()
    assert {"cpu_temperature", "system", "bme280", "dht22", "simulated"} <= set(types)
    for name, kind in types.items():
        doc = tomllib.loads(kind.sample)
        assert doc["sensors"][0]["type"] == name
        config = parse(
            {"device_id": "d", "kafka": {"bootstrap_servers": ["h:9092"]}, "sensors": doc["sensors"]}
        )
        assert config.sensors[0].type == name
        try:
            build(config.sensors[0], 0)
        except ConfigError as exc:  # hardware drivers absent here: only the missing extra may fail
            assert "extra" in str(exc), f"{name}: {exc}"


def test_edge_agent_sensors_prints_every_type(capsys: pytest.CaptureFixture[str]) -> None:
    from edge_agent.cli import main

    assert main(["sensors"]) == 0
    printed = tomllib.loads(capsys.readouterr().out.replace("\n\n[[sensors]]", "\n[[sensors]]"))
    assert [table["type"] for table in printed["sensors"]] == list(sensor_types())


def test_the_unit_allows_the_device_nodes_the_sensors_open_and_no_other() -> None:
    """Each sensor type declares its nodes; a device without such sensors gets no device at all."""
    tables: list[dict[str, Any]] = [
        {"type": "bme280", "bus": 3},
        {"type": "bme280"},
        {"type": "cpu_temperature", "interval": 10.0},
        {"type": "dht22", "pin": 17},
        {"type": "bme280", "bus": 3, "address": 0x77},
    ]
    assert device_nodes(tables) == ["/dev/gpiomem", "/dev/i2c-1", "/dev/i2c-3", "char-gpiochip"]
    assert device_nodes([{"type": "system"}, {"type": "simulated"}]) == []
