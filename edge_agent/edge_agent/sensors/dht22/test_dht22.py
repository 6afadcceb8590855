"""The DHT22 sensor without its driver: a clear error naming the extra, and the device nodes its
driver opens."""

from __future__ import annotations

import sys

import pytest

from edge_agent.sensor_config import ConfigError, SensorConfig
from edge_agent.sensors import build, device_nodes


def test_without_the_dht_extra_the_sensor_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "adafruit_dht", None)  # as when the extra is not installed
    with pytest.raises(ConfigError, match=r"sensors\[0\]\.type: dht22 needs the 'dht' extra"):
        build(SensorConfig("dht22", 5.0, "dht", {"pin": 4}), 0)


def test_its_driver_opens_the_gpio_character_device_or_gpiomem() -> None:
    assert device_nodes([{"type": "dht22", "pin": 17}]) == ["/dev/gpiomem", "char-gpiochip"]
