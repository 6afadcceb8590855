"""Sensors every Linux device has: SoC temperature, load and memory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.sensors import Measurement, option, register


@register("cpu_temperature")
@dataclass
class CpuTemperature:
    """`/sys/class/thermal/thermal_zone0/temp`, in millidegrees Celsius."""

    name: str
    path: Path

    @classmethod
    def from_options(cls, name: str, options: dict[str, Any], path: str) -> CpuTemperature:
        return cls(name, Path(option(options, "path", path, str, "/sys/class/thermal/thermal_zone0/temp")))

    def read(self) -> list[Measurement]:
        millidegrees = int(self.path.read_text().strip())
        return [("temperature", millidegrees / 1000.0, "C")]


@register("system")
@dataclass
class SystemLoad:
    """One-minute load per CPU and available memory, from /proc."""

    name: str
    proc: Path

    @classmethod
    def from_options(cls, name: str, options: dict[str, Any], path: str) -> SystemLoad:
        return cls(name, Path(option(options, "proc", path, str, "/proc")))

    def read(self) -> list[Measurement]:
        load1 = float((self.proc / "loadavg").read_text().split()[0])
        meminfo = {}
        for line in (self.proc / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            meminfo[key] = int(rest.split()[0])
        available = 100.0 * meminfo["MemAvailable"] / meminfo["MemTotal"]
        return [
            ("load1_per_cpu", load1 / (os.cpu_count() or 1), "ratio"),
            ("memory_available", round(available, 2), "%"),
        ]
