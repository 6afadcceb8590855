"""Sensors as small plugins behind one interface.

A sensor's `read()` returns a list of (metric, value, unit); it may raise, and the
agent logs the error and retries at the next interval. `build()` turns a
[[sensors]] table into a sensor, checking its options (errors name the key).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from edge_agent.config import ConfigError, SensorConfig

Measurement = tuple[str, float, str]


class Sensor(Protocol):
    name: str

    def read(self) -> list[Measurement]: ...


def build(config: SensorConfig, index: int) -> Sensor:
    from edge_agent.sensors import bme280, dht22, simulated, system

    factories: dict[str, Callable[[str, dict[str, Any], str], Sensor]] = {
        "cpu_temperature": system.CpuTemperature.from_options,
        "system": system.SystemLoad.from_options,
        "bme280": bme280.Bme280.from_options,
        "dht22": dht22.Dht22.from_options,
        "simulated": simulated.Simulated.from_options,
    }
    options = dict(config.options)
    sensor = factories[config.type](config.name, options, f"sensors[{index}].")
    if options:
        raise ConfigError(f"sensors[{index}].{sorted(options)[0]}: unknown key for a {config.type} sensor")
    return sensor


def option(options: dict[str, Any], key: str, path: str, kind: type, default: Any) -> Any:
    value = options.pop(key, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ConfigError(f"{path}{key}: must be {kind.__name__}, got {value!r}")
    return value
