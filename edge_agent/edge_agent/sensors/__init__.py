"""Sensors as small plugins behind one interface, each registering itself.

A sensor's `read()` returns a list of (metric, value, unit); it may raise, and the
agent logs the error and retries at the next interval. A sensor module registers its
type with `@register("type")`: the class's `from_options` checks the options of a
[[sensors]] table (errors name the key), and `<type>.toml` beside the module is a
sample table that configures it, each option with a comment (`edge-agent sensors`
prints them; a test builds every one). Every module of this package is a sensor module;
another package can add types through the `pikit.edge_agent.sensors` entry point group,
naming its module (its samples beside it, the same way).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from importlib.metadata import entry_points
from typing import Any, Protocol, TypeVar

from edge_agent.sensor_config import ConfigError, SensorConfig

Measurement = tuple[str, float, str]
ENTRY_POINTS = "pikit.edge_agent.sensors"


class Sensor(Protocol):
    name: str

    def read(self) -> list[Measurement]: ...


class Buildable(Protocol):
    @classmethod
    def from_options(cls, name: str, options: dict[str, Any], path: str) -> Sensor: ...


Devices = Callable[[dict[str, Any]], list[str]]


@dataclass(frozen=True)
class SensorType:
    build: Callable[[str, dict[str, Any], str], Sensor]
    sample: str  # a [[sensors]] table for it, in TOML
    # The device nodes a sensor of these options opens (systemd's DeviceAllow= form: a path,
    # or char-<driver>): the agent's unit allows these and no other.
    devices: Devices


_TYPES: dict[str, SensorType] = {}
B = TypeVar("B", bound=Buildable)


def register(type_name: str, devices: Devices = lambda _: []) -> Callable[[type[B]], type[B]]:
    def add(cls: type[B]) -> type[B]:
        if type_name in _TYPES:
            raise ValueError(f"sensor type {type_name!r} is registered twice")
        module = sys.modules[cls.__module__]
        sample = resources.files(module.__package__ or "").joinpath(f"{type_name}.toml").read_text()
        _TYPES[type_name] = SensorType(cls.from_options, sample.strip(), devices)
        return cls

    return add


@functools.cache
def _import_sensor_modules() -> None:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    for entry in entry_points(group=ENTRY_POINTS):
        importlib.import_module(entry.value)


def sensor_types() -> dict[str, SensorType]:
    """Every registered sensor type, this package's and other packages' (entry points)."""
    _import_sensor_modules()
    return dict(_TYPES)


def build(config: SensorConfig, index: int) -> Sensor:
    options = dict(config.options)
    sensor = sensor_types()[config.type].build(config.name, options, f"sensors[{index}].")
    if options:
        raise ConfigError(f"sensors[{index}].{sorted(options)[0]}: unknown key for a {config.type} sensor")
    return sensor


def device_nodes(sensors: list[dict[str, Any]]) -> list[str]:
    """The device nodes that [[sensors]] tables (as the agent's config has them) open, each
    once, sorted: a sensor type not known here opens none that the kit knows of."""
    types = sensor_types()
    found = {
        device
        for table in sensors
        if table.get("type") in types
        for device in types[table["type"]].devices(table)
    }
    return sorted(found)


def option(options: dict[str, Any], key: str, path: str, kind: type, default: Any) -> Any:
    value = options.pop(key, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ConfigError(f"{path}{key}: must be {kind.__name__}, got {value!r}")
    return value
