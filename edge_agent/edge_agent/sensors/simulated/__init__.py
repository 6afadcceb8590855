"""A seeded sensor for the lab, the tests and the benchmarks: same seed, same readings."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from edge_agent.sensor_config import ConfigError
from edge_agent.sensors import Measurement, option, register

# metric -> (start, step, low, high, unit)
PROFILES = {
    "temperature": (21.0, 0.2, -20.0, 60.0, "C"),
    "humidity": (45.0, 0.8, 0.0, 100.0, "%"),
    "pressure": (1013.0, 0.3, 950.0, 1050.0, "hPa"),
}


@register("simulated")
@dataclass
class Simulated:
    name: str
    metrics: list[str]
    rng: random.Random
    values: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_options(cls, name: str, options: dict[str, Any], path: str) -> Simulated:
        seed = option(options, "seed", path, int, 0)
        metrics = option(options, "metrics", path, list, ["temperature", "humidity"])
        unknown = [m for m in metrics if m not in PROFILES]
        if unknown or not metrics:
            raise ConfigError(f"{path}metrics: choose from {', '.join(PROFILES)}, got {metrics!r}")
        return cls(name, metrics, random.Random(seed), {m: PROFILES[m][0] for m in metrics})

    def read(self) -> list[Measurement]:
        out = []
        for metric in self.metrics:
            _start, step, low, high, unit = PROFILES[metric]
            value = min(high, max(low, self.values[metric] + self.rng.uniform(-step, step)))
            self.values[metric] = value
            out.append((metric, round(value, 3), unit))
        return out
