"""The simulated sensor: the same seed gives the same readings."""

from __future__ import annotations

from edge_agent.sensor_config import SensorConfig
from edge_agent.sensors import build


def test_simulated_is_deterministic_per_seed() -> None:
    def series(seed: int) -> list[object]:
        sensor = build(SensorConfig("simulated", 1.0, "sim", {"seed": seed, "metrics": ["temperature"]}), 0)
        return [sensor.read() for _ in range(5)]

    assert series(7) == series(7)
    assert series(7) != series(8)
