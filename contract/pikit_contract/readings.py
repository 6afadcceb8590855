"""The reading contract, versions 1 and 2: one place, used by the agent, the Spark apps and the tests.

A Kafka record from a device is keyed by the device id; its value is a UTF-8 JSON
batch of that device's readings, in sequence order:

    {"schema": 2, "device": "edge-1",
     "readings": [{"seq": 41, "sensor": "cpu", "metric": "temperature",
                   "value": 48.3, "unit": "C", "ts": 1795323249950}, ...]}

`seq` increases by one per reading per device, forever (it survives restarts), so a
consumer finds gaps and drops duplicates by (device, seq). `ts` is the event time (UTC):
an integer of Unix milliseconds in version 2, a number of Unix seconds in version 1.
Batching readings per record is what lets a Pi Zero keep up.

Headers: the agent's release in `pikit-agent` (what a roll-out waits for), and the
device's signature (pikit_contract/signing.py).

How the contract evolves (the rules every change follows):
- A compatible change keeps the version: a new optional field in a record or a reading, a
  new sensor or metric. A reader keeps the fields it knows and passes over the rest; the
  record, whole, stays in the readings topic for a reader that knows more.
- A change of meaning is a new version: a field renamed, retyped, rescaled or made
  required. Version 2 is one: `ts` became integer milliseconds (exact, and an integer is
  cheaper than a float for a Pi Zero to format).
- A reader refuses a version it does not know (a dead letter `unknown schema`), so the
  readers move first: every Spark app reads every version in SCHEMAS_READ, and a roll-out of
  an agent release checks first that the running apps read the version that release writes
  (roles/edge_agent/tasks/contract_gate.yml). An agent writes SCHEMA_VERSION; its spool keeps
  version 1 bodies, which any release sends (spool_body, envelopes).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, Protocol

# The topic an agent writes to when its configuration names none: the kit's default name, which a
# site may change (roles/pikit: pikit_readings_topic, which a unit test holds to this).
READINGS_TOPIC = "sensor-readings"
SCHEMA_VERSION = 2  # what this release's agent writes
SCHEMAS_READ = (1, 2)  # what this release's readers accept
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
TS_MS_MIN, TS_MS_MAX = TS_MIN * 1000, TS_MAX * 1000


SEQ_MAX = 2**63 - 1  # a consumer keeps seq in a 64-bit integer

# Why a record or a reading breaks the contract. These texts are stable: the agent, the
# Spark apps' dead letters and the tests all use them, and the detail (the offending
# value) comes after them.
NOT_JSON = "not JSON"
NOT_AN_OBJECT = "record is not a JSON object"
UNKNOWN_SCHEMA = f"unknown schema (this reader knows {', '.join(map(str, SCHEMAS_READ))})"
BAD_DEVICE = "device must be a short name"
NO_READINGS = "readings must be a non-empty list"
READING_NOT_AN_OBJECT = "reading is not an object"
BAD_SEQ = "seq must be a non-negative integer"
BAD_UNIT = "unit must be a short string"
BAD_VALUE = "value must be a finite number"
BAD_TS = f"ts must be Unix seconds between {TS_MIN} and {TS_MAX}"
BAD_TS_MS = f"ts must be integer Unix milliseconds between {TS_MS_MIN} and {TS_MS_MAX}"


def bad_ts(schema: int) -> str:
    return BAD_TS_MS if schema >= 2 else BAD_TS


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

    def body(self, schema: int = SCHEMA_VERSION) -> dict[str, Any]:
        out = asdict(self)
        del out["device"]
        if schema >= 2:
            out["ts"] = round(self.ts * 1000)
        return out


def validate_reading(device: str, raw: Any, schema: int) -> Reading:
    """One reading of a record of version `schema` (decode_envelope's), its ts in seconds."""
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
    if schema >= 2:
        if not isinstance(ts, int) or isinstance(ts, bool) or not TS_MS_MIN <= ts <= TS_MS_MAX:
            raise ContractError(BAD_TS_MS, repr(ts))
        seconds = ts / 1000
    elif not _is_number(ts) or not TS_MIN <= ts <= TS_MAX:
        raise ContractError(BAD_TS, repr(ts))
    else:
        seconds = float(ts)
    return Reading(device, seq, raw["sensor"], raw["metric"], float(value), raw["unit"], seconds)


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


def spool_body(reading: Reading) -> bytes:
    """A reading's body as the agent spools it: version 1's JSON, as every release before wrote
    it. A spool then opens under any release: an upgrade sends what the release before spooled,
    and a rollback to a release that knows version 1 alone sends what this one spooled."""
    return json.dumps(reading.body(1), separators=(",", ":")).encode()


def in_milliseconds(body: bytes) -> bytes:
    """A spooled (version 1) body as version 2 writes it: ts, its last field, in integer
    milliseconds. Only the number is rewritten, so that a Pi Zero sends without parsing JSON."""
    head, sep, tail = body.rpartition(b',"ts":')
    if sep and tail.endswith(b"}"):
        try:
            seconds = float(tail[:-1])
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds):
            return head + b',"ts":%d}' % round(seconds * 1000)
    doc = json.loads(body)  # not in the agent's own form: the slow way, same result
    return json.dumps({**doc, "ts": round(doc["ts"] * 1000)}, separators=(",", ":")).encode()


def envelope(device: str, schema: int, bodies: Iterable[bytes]) -> bytes:
    """The contract's record value around reading bodies of version `schema`, not re-encoded."""
    head = b'{"schema":%d,"device":"%s","readings":[' % (schema, device.encode())
    return head + b",".join(bodies) + b"]}"


def envelopes(
    device: str, records: Sequence[Spooled], size: int, schema: int = SCHEMA_VERSION
) -> list[bytes]:
    """The record values of version `schema` for spooled readings in order, `size` readings each."""
    bodies = [r.payload for r in records]
    if schema >= 2:
        bodies = [in_milliseconds(b) for b in bodies]
    return [envelope(device, schema, bodies[i : i + size]) for i in range(0, len(bodies), size)]


def encode_batch(device: str, readings: list[Reading], schema: int = SCHEMA_VERSION) -> bytes:
    return json.dumps(
        {"schema": schema, "device": device, "readings": [r.body(schema) for r in readings]},
        separators=(",", ":"),
    ).encode()


class Envelope(NamedTuple):
    device: str
    readings: list[Any]
    schema: int


def decode_envelope(value: bytes) -> Envelope:
    """A record's device, its readings (not yet validated one by one) and its version."""
    try:
        doc = json.loads(value, parse_constant=_not_json)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise ContractError(NOT_JSON, str(exc)) from None
    if not isinstance(doc, dict):
        raise ContractError(NOT_AN_OBJECT, type(doc).__name__)
    schema = doc.get("schema")
    if type(schema) is not int or schema not in SCHEMAS_READ:
        raise ContractError(UNKNOWN_SCHEMA, repr(schema))
    device = doc.get("device")
    if not isinstance(device, str) or not _NAME.match(device):
        raise ContractError(BAD_DEVICE, repr(device))
    readings = doc.get("readings")
    if not isinstance(readings, list) or not readings:
        raise ContractError(NO_READINGS, type(readings).__name__)
    return Envelope(device, readings, schema)


def _not_json(token: str) -> Any:
    # NaN and Infinity are Python's extensions, not JSON (RFC 8259): no other reader takes them.
    raise ValueError(f"{token} is not a JSON number")


def decode_batch(value: bytes) -> list[Reading]:
    """Every reading of a record, or ContractError for a record that breaks the contract."""
    device, readings, schema = decode_envelope(value)
    return [validate_reading(device, raw, schema) for raw in readings]
