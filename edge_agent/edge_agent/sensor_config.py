"""What a sensor module needs of the configuration: a sensor's table, and the error a bad
value raises. Its own module, beneath both config.py (which parses the whole file and checks each
sensor's type against the registry) and sensors/ (which builds a sensor from its table), so that
neither imports the other back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """Invalid configuration; the message starts with the offending key."""


@dataclass(frozen=True)
class SensorConfig:
    type: str
    interval: float
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    timeout: float = 10.0  # a read taking longer fails; parse() defaults it to the interval
