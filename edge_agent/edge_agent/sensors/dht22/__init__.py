"""DHT22 temperature and humidity, through the optional adafruit-circuitpython-dht package.

Optional because that driver is known to spin a CPU core on a Pi 5; install the
`dht` extra only where a DHT22 is wired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edge_agent.sensor_config import ConfigError
from edge_agent.sensors import Measurement, option, register


# The driver bit-bangs the pin through the GPIO character device (or /dev/gpiomem on older
# kernels and libraries).
@register("dht22", devices=lambda _: ["char-gpiochip", "/dev/gpiomem"])
@dataclass
class Dht22:
    name: str
    device: Any

    @classmethod
    def from_options(cls, name: str, options: dict[str, Any], path: str) -> Dht22:
        pin = option(options, "pin", path, int, 4)
        try:
            import adafruit_dht
            import board
        except ImportError:
            raise ConfigError(
                f"{path}type: dht22 needs the 'dht' extra (adafruit-circuitpython-dht)"
            ) from None
        return cls(name, adafruit_dht.DHT22(getattr(board, f"D{pin}"), use_pulseio=False))

    def read(self) -> list[Measurement]:
        temperature, humidity = self.device.temperature, self.device.humidity
        if temperature is None or humidity is None:
            raise RuntimeError("DHT22 returned no data (checksum or timing); retrying next interval")
        return [("temperature", float(temperature), "C"), ("humidity", float(humidity), "%")]
