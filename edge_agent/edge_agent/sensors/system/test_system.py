"""The system sensors against fake sysfs and /proc files."""

from __future__ import annotations

from pathlib import Path

from edge_agent.sensor_config import SensorConfig
from edge_agent.sensors import build


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
