"""The BME280 sensor: the datasheet's compensation, and the sensor over a fake I2C bus."""

from __future__ import annotations

import struct

import pytest

from edge_agent.sensors.bme280 import Bme280, Calibration, compensate

# The BMP280/BME280 datasheet's worked example (temperature and pressure).
T = (27504, 26435, -1000)
P = (36477, -10685, 3024, 2855, 140, -7, 15500, -14600, 6000)
H = (75, 370, 0, 310, 50, 30)


def test_bme280_compensation_matches_the_datasheet_example() -> None:
    temperature, pressure, humidity = compensate(Calibration(T, P, H), 519888, 415148, 30000)
    assert temperature == pytest.approx(25.08, abs=0.01)
    assert pressure == pytest.approx(1006.53, abs=0.01)
    assert 0.0 <= humidity <= 100.0


class FakeBus:
    """Register file of a BME280 holding the datasheet example."""

    def __init__(self, address: int = 0x76, chip: int = 0x60) -> None:
        self.address = address
        regs = bytearray(256)
        regs[0xD0] = chip
        regs[0x88 : 0x88 + 24] = struct.pack("<Hhh", *T) + struct.pack("<Hhhhhhhhh", *P)
        regs[0xA1] = H[0]
        h4, h5 = H[3], H[4]
        regs[0xE1 : 0xE1 + 7] = struct.pack("<hB", H[1], H[2]) + bytes(
            [h4 >> 4, (h4 & 0x0F) | ((h5 & 0x0F) << 4), h5 >> 4, H[5] & 0xFF]
        )
        adc_p, adc_t, adc_h = 415148, 519888, 30000
        regs[0xF7:0xFF] = bytes(
            [
                adc_p >> 12,
                (adc_p >> 4) & 0xFF,
                (adc_p & 0xF) << 4,
                adc_t >> 12,
                (adc_t >> 4) & 0xFF,
                (adc_t & 0xF) << 4,
                adc_h >> 8,
                adc_h & 0xFF,
            ]
        )
        self.regs = regs
        self.writes: list[tuple[int, int]] = []

    def read_byte_data(self, address: int, register: int) -> int:
        assert address == self.address
        return self.regs[register]

    def read_i2c_block_data(self, address: int, register: int, length: int) -> list[int]:
        assert address == self.address
        return list(self.regs[register : register + length])

    def write_byte_data(self, address: int, register: int, value: int) -> None:
        self.writes.append((register, value))


def test_bme280_over_a_fake_i2c_bus() -> None:
    bus = FakeBus()
    sensor = Bme280.on_bus("bme", bus, 0x76)
    assert sensor.calibration == Calibration(T, P, H)
    readings = {m: v for m, v, _ in sensor.read()}
    assert readings["temperature"] == pytest.approx(25.08, abs=0.01)
    assert readings["pressure"] == pytest.approx(1006.53, abs=0.01)
    assert (0xF4, 0x25) in bus.writes, "a forced measurement was started"


def test_bme280_refuses_a_different_chip() -> None:
    with pytest.raises(RuntimeError, match="no BME280 at 0x77"):
        Bme280.on_bus("bme", FakeBus(0x77, chip=0x58), 0x77)
