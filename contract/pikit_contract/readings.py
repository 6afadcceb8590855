"""The reading contract, version 1: one place, used by the agent, the Spark apps and the tests.

A Kafka record from a device is keyed by the device id; its value is a UTF-8 JSON
batch of that device's readings, in sequence order:

    {"schema": 1, "device": "edge-1",
     "readings": [{"seq": 41, "sensor": "cpu", "metric": "temperature",
                   "value": 48.3, "unit": "C", "ts": 1795323249.95}, ...]}

`seq` increases by one per reading per device, forever (it survives restarts), so a
consumer finds gaps and drops duplicates by (device, seq). `ts` is the event time in
Unix seconds (UTC). Batching readings per record is what lets a Pi Zero keep up.

Headers: the agent's release in `pikit-agent` (what a roll-out waits for), and the
device's signature (pikit_contract/signing.py).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

SCHEMA_VERSION = 1
RELEASE_HEADER = "pikit-agent"
# Readings in the device's spool when a record left it (that record's included): what `pikit
# status` shows of a device it cannot reach, read from what the device sent.
SPOOL_HEADER = "pikit-spool"
# Device, sensor and metric names. The Spark apps use the same pattern (Java regex syntax).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
READING_FIELDS = ("seq", "sensor", "metric", "value", "unit", "ts")
UNIT_MAX_LEN = 16
TS_MIN, TS_MAX = 946684800, 4102444800  # 2000-01-01 and 2100-01-01, UTC


SEQ_MAX = 2**63 - 1  # a consumer keeps seq in a 64-bit integer

# Why a record or a reading breaks the contract. These texts are stable: the agent, the
# Spark apps' dead letters and the tests all use them, and the detail (the offending
# value) comes after them.
NOT_JSON = "not JSON"
NOT_AN_OBJECT = "record is not a JSON object"
UNKNOWN_SCHEMA = f"unknown schema (this reader knows {SCHEMA_VERSION})"
BAD_DEVICE = "device must be a short name"
NO_READINGS = "readings must be a non-empty list"
READING_NOT_AN_OBJECT = "reading is not an object"
BAD_SEQ = "seq must be a non-negative integer"
BAD_UNIT = "unit must be a short string"
BAD_VALUE = "value must be a finite number"
BAD_TS = f"ts must be Unix seconds between {TS_MIN} and {TS_MAX}"


def lacks(field: str) -> str:
    return f"reading lacks {field}"


def bad_name(field: str) -> str:
    return f"{field} must be a short name"


class ContractError(ValueError):
    """A record or reading that does not follow the contract: `reason` is one of the stable
    texts above; the message adds the detail."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


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
        raise ContractError(READING_NOT_AN_OBJECT, type(raw).__name__)
    missing = [f for f in READING_FIELDS if f not in raw]
    if missing:
        raise ContractError(lacks(missing[0]), ", ".join(missing))
    seq, value, ts = raw["seq"], raw["value"], raw["ts"]
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= SEQ_MAX:
        raise ContractError(BAD_SEQ, repr(seq))
    for name in ("sensor", "metric"):
        if not isinstance(raw[name], str) or not _NAME.match(raw[name]):
            raise ContractError(bad_name(name), repr(raw[name]))
    if not isinstance(raw["unit"], str) or len(raw["unit"]) > UNIT_MAX_LEN:
        raise ContractError(BAD_UNIT, repr(raw["unit"]))
    if not _is_number(value) or not math.isfinite(value):
        raise ContractError(BAD_VALUE, repr(value))
    if not _is_number(ts) or not TS_MIN <= ts <= TS_MAX:
        raise ContractError(BAD_TS, repr(ts))
    return Reading(device, seq, raw["sensor"], raw["metric"], float(value), raw["unit"], float(ts))


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        float(value)  # an integer beyond a double's range is not a reading's number
    except OverflowError:
        return False
    return True


class Spooled(Protocol):
    """A spooled reading (edge_agent/spool.py's Record): its body as the agent encoded it."""

    @property
    def payload(self) -> bytes: ...


def envelope(device: str, records: Iterable[Spooled]) -> bytes:
    """The contract's record value, built from the spooled reading bodies without re-encoding."""
    head = b'{"schema":%d,"device":"%s","readings":[' % (SCHEMA_VERSION, device.encode())
    return head + b",".join(r.payload for r in records) + b"]}"


def encode_batch(device: str, readings: list[Reading]) -> bytes:
    return json.dumps(
        {"schema": SCHEMA_VERSION, "device": device, "readings": [r.body() for r in readings]},
        separators=(",", ":"),
    ).encode()


def decode_envelope(value: bytes) -> tuple[str, list[Any]]:
    """A record's device and its readings, not yet validated one by one."""
    try:
        doc = json.loads(value, parse_constant=_not_json)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise ContractError(NOT_JSON, str(exc)) from None
    if not isinstance(doc, dict):
        raise ContractError(NOT_AN_OBJECT, type(doc).__name__)
    if type(doc.get("schema")) is not int or doc["schema"] != SCHEMA_VERSION:
        raise ContractError(UNKNOWN_SCHEMA, repr(doc.get("schema")))
    device = doc.get("device")
    if not isinstance(device, str) or not _NAME.match(device):
        raise ContractError(BAD_DEVICE, repr(device))
    readings = doc.get("readings")
    if not isinstance(readings, list) or not readings:
        raise ContractError(NO_READINGS, type(readings).__name__)
    return device, readings


def _not_json(token: str) -> Any:
    # NaN and Infinity are Python's extensions, not JSON (RFC 8259): no other reader takes them.
    raise ValueError(f"{token} is not a JSON number")


def decode_batch(value: bytes) -> list[Reading]:
    """Every reading of a record, or ContractError for a record that breaks the contract."""
    device, readings = decode_envelope(value)
    return [validate_reading(device, raw) for raw in readings]
