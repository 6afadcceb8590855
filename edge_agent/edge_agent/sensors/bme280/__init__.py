"""Bosch BME280 (temperature, humidity, pressure) on I2C at 0x76 or 0x77, via smbus2.

The compensation is the datasheet's floating-point version (BME280 datasheet 8.1).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any, Protocol

from edge_agent.sensor_config import ConfigError
from edge_agent.sensors import Measurement, option, register

CHIP_ID = 0x60


class Bus(Protocol):
    def read_i2c_block_data(self, address: int, register: int, length: int) -> list[int]: ...

    def write_byte_data(self, address: int, register: int, value: int) -> None: ...

    def read_byte_data(self, address: int, register: int) -> int: ...


@dataclass(frozen=True)
class Calibration:
    t: tuple[int, int, int]
    p: tuple[int, ...]
    h: tuple[int, int, int, int, int, int]

    @classmethod
    def read(cls, bus: Bus, address: int) -> Calibration:
        block1 = bytes(bus.read_i2c_block_data(address, 0x88, 26))
        t = struct.unpack_from("<Hhh", block1, 0)
        p = struct.unpack_from("<Hhhhhhhhh", block1, 6)
        h1 = block1[25]
        block2 = bytes(bus.read_i2c_block_data(address, 0xE1, 7))
        h2, h3 = struct.unpack_from("<hB", block2, 0)
        e4, e5, e6 = block2[3], block2[4], block2[5]
        h4 = _signed12((e4 << 4) | (e5 & 0x0F))
        h5 = _signed12((e6 << 4) | (e5 >> 4))
        h6 = struct.unpack_from("<b", block2, 6)[0]
        return cls(t, p, (h1, h2, h3, h4, h5, h6))


def _signed12(value: int) -> int:
    return value - 4096 if value & 0x800 else value


def compensate(cal: Calibration, adc_t: int, adc_p: int, adc_h: int) -> tuple[float, float, float]:
    """Raw ADC values to (degrees C, hPa, % relative humidity)."""
    t1, t2, t3 = cal.t
    var1 = (adc_t / 16384.0 - t1 / 1024.0) * t2
    var2 = ((adc_t / 131072.0 - t1 / 8192.0) ** 2) * t3
    t_fine = var1 + var2
    temperature = t_fine / 5120.0

    p1, p2, p3, p4, p5, p6, p7, p8, p9 = cal.p
    var1 = t_fine / 2.0 - 64000.0
    var2 = var1 * var1 * p6 / 32768.0 + var1 * p5 * 2.0
    var2 = var2 / 4.0 + p4 * 65536.0
    var1 = (p3 * var1 * var1 / 524288.0 + p2 * var1) / 524288.0
    var1 = (1.0 + var1 / 32768.0) * p1
    if var1 == 0:
        raise RuntimeError("BME280 pressure calibration gives a zero divisor")
    pressure = 1048576.0 - adc_p
    pressure = (pressure - var2 / 4096.0) * 6250.0 / var1
    var1 = p9 * pressure * pressure / 2147483648.0
    var2 = pressure * p8 / 32768.0
    pressure = pressure + (var1 + var2 + p7) / 16.0

    h1, h2, h3, h4, h5, h6 = cal.h
    humidity = t_fine - 76800.0
    humidity = (adc_h - (h4 * 64.0 + h5 / 16384.0 * humidity)) * (
        h2 / 65536.0 * (1.0 + h6 / 67108864.0 * humidity * (1.0 + h3 / 67108864.0 * humidity))
    )
    humidity = humidity * (1.0 - h1 * humidity / 524288.0)
    return temperature, pressure / 100.0, min(100.0, max(0.0, humidity))


@register("bme280", devices=lambda table: [f"/dev/i2c-{table.get('bus', 1)}"])
@dataclass
class Bme280:
    name: str
    bus: Bus
    address: int
    calibration: Calibration

    @classmethod
    def from_options(cls, name: str, options: dict[str, Any], path: str) -> Bme280:
        bus_number = option(options, "bus", path, int, 1)
        address = option(options, "address", path, int, 0x76)
        if address not in (0x76, 0x77):
            raise ConfigError(f"{path}address: a BME280 answers at 0x76 (118) or 0x77 (119), got {address}")
        try:
            from smbus2 import SMBus
        except ImportError:
            raise ConfigError(f"{path}type: bme280 needs the 'i2c' extra (smbus2)") from None
        return cls.on_bus(name, SMBus(bus_number), address)

    @classmethod
    def on_bus(cls, name: str, bus: Bus, address: int) -> Bme280:
        chip = bus.read_byte_data(address, 0xD0)
        if chip != CHIP_ID:
            raise RuntimeError(f"no BME280 at 0x{address:02x} (chip id 0x{chip:02x})")
        return cls(name, bus, address, Calibration.read(bus, address))

    def read(self) -> list[Measurement]:
        # Forced mode, oversampling x1 for all three: one measurement, then sleep.
        self.bus.write_byte_data(self.address, 0xF2, 0x01)
        self.bus.write_byte_data(self.address, 0xF4, 0x25)
        for _ in range(50):  # a forced x1 measurement takes under 10 ms
            if not self.bus.read_byte_data(self.address, 0xF3) & 0x08:
                break
            time.sleep(0.002)
        else:
            raise RuntimeError(f"BME280 at 0x{self.address:02x} stayed busy")
        raw = self.bus.read_i2c_block_data(self.address, 0xF7, 8)
        adc_p = (raw[0] << 12) | (raw[1] << 4) | (raw[2] >> 4)
        adc_t = (raw[3] << 12) | (raw[4] << 4) | (raw[5] >> 4)
        adc_h = (raw[6] << 8) | raw[7]
        temperature, pressure, humidity = compensate(self.calibration, adc_t, adc_p, adc_h)
        return [
            ("temperature", round(temperature, 2), "C"),
            ("pressure", round(pressure, 2), "hPa"),
            ("humidity", round(humidity, 2), "%"),
        ]
