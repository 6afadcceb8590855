"""Config validation: errors name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from edge_agent.config import ConfigError, load, parse
from edge_agent.sensors import build

from pikit import REPO

GOOD: dict[str, Any] = {
    "device_id": "edge-1",
    "kafka": {"bootstrap_servers": ["10.0.0.1:9092"], "ca_file": "/ca.crt", "cert_file": "/edge.pem"},
    "sensors": [{"type": "simulated", "interval": 0.5, "seed": 3}],
}


def with_(path: str, value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
        for k, v in GOOD.items()
    }
    doc["sensors"] = [dict(s) for s in GOOD["sensors"]]
    target: Any = doc
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    last = keys[-1]
    if value is None:
        del target[last]
    else:
        target[last] = value
    return doc


def test_a_good_config_parses_with_defaults() -> None:
    config = parse(GOOD)
    assert config.device_id == "edge-1"
    assert config.kafka.topic == "sensor-readings"
    assert config.spool.fsync == "interval"
    assert config.sensors[0].options == {"seed": 3}


def test_the_example_config_is_valid() -> None:
    config = load(REPO / "edge_agent/config.example.toml")
    assert [s.type for s in config.sensors] == ["cpu_temperature", "system", "bme280"]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("device_id", None, "device_id: required"),
        ("device_id", "edge 1", "device_id: letters"),
        ("kafka.bootstrap_servers", [], "kafka.bootstrap_servers: must be a non-empty list"),
        ("kafka.bootstrap_servers", ["nohost"], "kafka.bootstrap_servers"),
        ("kafka.compression", "brotli", "kafka.compression: must be one of"),
        ("kafka.readings_per_record", 0, "kafka.readings_per_record: must be positive"),
        ("kafka.cert_file", None, "kafka.cert_file: ca_file and cert_file go together"),
        ("kafka.colour", "blue", "kafka.colour: unknown key"),
        ("sensors", [], "sensors: at least one"),
        ("sensors.0.type", "lidar", "sensors[0].type: must be one of"),
        ("sensors.0.interval", -1, "sensors[0].interval: must be positive"),
        ("sensors.0.interval", "often", "sensors[0].interval: must be float"),
        ("spool", {"fsync": "sometimes"}, "spool.fsync: must be one of"),
        ("spool", {"max_bytes": 10}, "spool.max_bytes: at least"),
        ("metrics", {"listen": "everywhere"}, "metrics.listen"),
    ],
)
def test_errors_name_the_key(path: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(with_(path, value))


def test_sensor_options_are_checked() -> None:
    config = parse(with_("sensors", [{"type": "simulated", "metrics": ["radiation"]}]))
    with pytest.raises(ConfigError, match=r"sensors\[0\]\.metrics"):
        build(config.sensors[0], 0)
    config = parse(with_("sensors", [{"type": "simulated", "wobble": 1}]))
    with pytest.raises(ConfigError, match=r"sensors\[0\]\.wobble: unknown key"):
        build(config.sensors[0], 0)
    config = parse(with_("sensors", [{"type": "bme280", "address": 0x40}]))
    with pytest.raises(ConfigError, match=r"sensors\[0\]\.address"):
        build(config.sensors[0], 0)


def test_duplicate_sensor_names_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"sensors\[1\]\.name"):
        parse(with_("sensors", [{"type": "system"}, {"type": "system"}]))


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("device_id = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(path)
