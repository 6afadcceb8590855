"""The reading contract, version 1: one place, used by the agent, the Spark apps and the tests.

A Kafka record from a device is keyed by the device id; its value is a UTF-8 JSON
batch of that device's readings, in sequence order:

    {"schema": 1, "device": "edge-1",
     "readings": [{"seq": 41, "sensor": "cpu", "metric": "temperature",
                   "value": 48.3, "unit": "C", "ts": 1795323249.95}, ...]}

`seq` increases by one per reading per device, forever (it survives restarts), so a
consumer finds gaps and drops duplicates by (device, seq). `ts` is the event time in
Unix seconds (UTC). Batching readings per record is what lets a Pi Zero keep up.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any

SCHEMA_VERSION = 1
# Device, sensor and metric names. The Spark apps use the same pattern (Java regex syntax).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
READING_FIELDS = ("seq", "sensor", "metric", "value", "unit", "ts")
UNIT_MAX_LEN = 16
TS_MIN, TS_MAX = 946684800, 4102444800  # 2000-01-01 and 2100-01-01, UTC


class ContractError(ValueError):
    """A record or reading that does not follow the contract; the message says why."""


@dataclass(frozen=True)
class Reading:
    device: str
    seq: int
    sensor: str
    metric: str
    value: float
    unit: str
    ts: float

    def body(self) -> dict[str, Any]:
        out = asdict(self)
        del out["device"]
        return out


def validate_reading(device: str, raw: Any) -> Reading:
    if not isinstance(raw, dict):
        raise ContractError(f"reading is {type(raw).__name__}, not an object")
    missing = [f for f in READING_FIELDS if f not in raw]
    if missing:
        raise ContractError(f"reading lacks {', '.join(missing)}")
    seq, value, ts = raw["seq"], raw["value"], raw["ts"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ContractError(f"seq must be a non-negative integer, got {seq!r}")
    for name in ("sensor", "metric"):
        if not isinstance(raw[name], str) or not _NAME.match(raw[name]):
            raise ContractError(f"{name} must be a short name, got {raw[name]!r}")
    if not isinstance(raw["unit"], str) or len(raw["unit"]) > UNIT_MAX_LEN:
        raise ContractError(f"unit must be a short string, got {raw['unit']!r}")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ContractError(f"value must be a finite number, got {value!r}")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not TS_MIN <= ts <= TS_MAX:
        raise ContractError(f"ts must be Unix seconds between {TS_MIN} and {TS_MAX}, got {ts!r}")
    return Reading(device, seq, raw["sensor"], raw["metric"], float(value), raw["unit"], float(ts))


def encode_batch(device: str, readings: list[Reading]) -> bytes:
    return json.dumps(
        {"schema": SCHEMA_VERSION, "device": device, "readings": [r.body() for r in readings]},
        separators=(",", ":"),
    ).encode()


def decode_envelope(value: bytes) -> tuple[str, list[Any]]:
    """A record's device and its readings, not yet validated one by one."""
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ContractError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ContractError("record is not a JSON object")
    if type(doc.get("schema")) is not int or doc["schema"] != SCHEMA_VERSION:
        raise ContractError(f"unknown schema {doc.get('schema')!r} (this reader knows {SCHEMA_VERSION})")
    device = doc.get("device")
    if not isinstance(device, str) or not _NAME.match(device):
        raise ContractError(f"device must be a short name, got {device!r}")
    readings = doc.get("readings")
    if not isinstance(readings, list) or not readings:
        raise ContractError("readings must be a non-empty list")
    return device, readings


def decode_batch(value: bytes) -> list[Reading]:
    """Every reading of a record, or ContractError for a record that breaks the contract."""
    device, readings = decode_envelope(value)
    return [validate_reading(device, raw) for raw in readings]
