"""Each sensor against fake sysfs, /proc and I2C data."""

from __future__ import annotations

import struct
import tomllib
from pathlib import Path
from typing import Any

import pytest
from edge_agent.config import ConfigError, SensorConfig, parse
from edge_agent.sensors import build, device_nodes, sensor_types
from edge_agent.sensors.bme280 import Bme280, Calibration, compensate


def test_cpu_temperature_reads_millidegrees(tmp_path: Path) -> None:
    (tmp_path / "temp").write_text("48312\n")
    sensor = build(SensorConfig("cpu_temperature", 1.0, "cpu", {"path": str(tmp_path / "temp")}), 0)
    assert sensor.read() == [("temperature", 48.312, "C")]


def test_system_reads_load_and_memory(tmp_path: Path) -> None:
    (tmp_path / "loadavg").write_text("0.50 0.40 0.30 1/100 1234\n")
    (tmp_path / "meminfo").write_text("MemTotal:  1000 kB\nMemFree: 100 kB\nMemAvailable:  250 kB\n")
    sensor = build(SensorConfig("system", 1.0, "sys", {"proc": str(tmp_path)}), 0)
    readings = dict((m, v) for m, v, _ in sensor.read())
    assert readings["memory_available"] == 25.0
    assert readings["load1_per_cpu"] > 0


def test_simulated_is_deterministic_per_seed() -> None:
    def series(seed: int) -> list[object]:
        sensor = build(SensorConfig("simulated", 1.0, "sim", {"seed": seed, "metrics": ["temperature"]}), 0)
        return [sensor.read() for _ in range(5)]

    assert series(7) == series(7)
    assert series(7) != series(8)


# The BMP280/BME280 datasheet's worked example (temperature and pressure).
T = (27504, 26435, -1000)
P = (36477, -10685, 3024, 2855, 140, -7, 15500, -14600, 6000)
H = (75, 370, 0, 310, 50, 30)


def test_bme280_compensation_matches_the_datasheet_example() -> None:
    temperature, pressure, humidity = compensate(Calibration(T, P, H), 519888, 415148, 30000)
    assert temperature == pytest.approx(25.08, abs=0.01)
    assert pressure == pytest.approx(1006.53, abs=0.01)
    assert 0.0 <= humidity <= 100.0


class FakeBus:
    """Register file of a BME280 holding the datasheet example."""

    def __init__(self, address: int = 0x76, chip: int = 0x60) -> None:
        self.address = address
        regs = bytearray(256)
        regs[0xD0] = chip
        regs[0x88 : 0x88 + 24] = struct.pack("<Hhh", *T) + struct.pack("<Hhhhhhhhh", *P)
        regs[0xA1] = H[0]
        h4, h5 = H[3], H[4]
        regs[0xE1 : 0xE1 + 7] = struct.pack("<hB", H[1], H[2]) + bytes(
            [h4 >> 4, (h4 & 0x0F) | ((h5 & 0x0F) << 4), h5 >> 4, H[5] & 0xFF]
        )
        adc_p, adc_t, adc_h = 415148, 519888, 30000
        regs[0xF7:0xFF] = bytes(
            [
                adc_p >> 12,
                (adc_p >> 4) & 0xFF,
                (adc_p & 0xF) << 4,
                adc_t >> 12,
                (adc_t >> 4) & 0xFF,
                (adc_t & 0xF) << 4,
                adc_h >> 8,
                adc_h & 0xFF,
            ]
        )
        self.regs = regs
        self.writes: list[tuple[int, int]] = []

    def read_byte_data(self, address: int, register: int) -> int:
        assert address == self.address
        return self.regs[register]

    def read_i2c_block_data(self, address: int, register: int, length: int) -> list[int]:
        assert address == self.address
        return list(self.regs[register : register + length])

    def write_byte_data(self, address: int, register: int, value: int) -> None:
        self.writes.append((register, value))


def test_bme280_over_a_fake_i2c_bus() -> None:
    bus = FakeBus()
    sensor = Bme280.on_bus("bme", bus, 0x76)
    assert sensor.calibration == Calibration(T, P, H)
    readings = {m: v for m, v, _ in sensor.read()}
    assert readings["temperature"] == pytest.approx(25.08, abs=0.01)
    assert readings["pressure"] == pytest.approx(1006.53, abs=0.01)
    assert (0xF4, 0x25) in bus.writes, "a forced measurement was started"


def test_bme280_refuses_a_different_chip() -> None:
    with pytest.raises(RuntimeError, match="no BME280 at 0x77"):
        Bme280.on_bus("bme", FakeBus(0x77, chip=0x58), 0x77)


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
