"""Kafka-like records for the Spark tests: well-formed batches and every way to break the contract."""

from __future__ import annotations

import json
from typing import Any

T0 = 1_795_000_000.0  # 2026-11-18, aligned to a minute boundary below
T0 = T0 - T0 % 60


def reading(
    seq: int, ts: float, value: float = 20.0, sensor: str = "sim", metric: str = "temperature"
) -> dict[str, Any]:
    return {"seq": seq, "sensor": sensor, "metric": metric, "value": value, "unit": "C", "ts": ts}


def batch(device: str, readings: list[Any], schema: int = 1) -> bytes:
    """A record as the agent writes it (pikit_contract.readings.encode_batch), whatever its readings hold."""
    record = {"schema": schema, "device": device, "readings": readings}
    return json.dumps(record, separators=(",", ":")).encode()


def in_ms(raw: Any) -> Any:
    """A version 1 reading as version 2 writes it (ts in integer milliseconds), whatever else it holds."""
    if isinstance(raw, dict) and isinstance(raw.get("ts"), float):
        return {**raw, "ts": round(raw["ts"] * 1000)}
    return raw


MALFORMED_RECORDS: list[bytes] = [
    b"not json at all",
    b"[1, 2, 3]",
    b'{"schema": 3, "device": "edge-1", "readings": [{}]}',
    b'{"schema": 0, "device": "edge-1", "readings": [{}]}',
    b'{"schema": 1.0, "device": "edge-1", "readings": [{}]}',
    b'{"schema": true, "device": "edge-1", "readings": [{}]}',
    b'{"schema": 1, "device": "bad device!", "readings": []}',
    b'{"schema": 1, "device": "edge-1", "readings": []}',
    b'{"schema": 1, "device": "edge-1", "readings": {"seq": 1}}',
    b'{"schema": 1, "readings": [{}]}',
    b"\xff\xfe\x00 not utf-8",
    b'{"schema": 1, "device": "edge-\xff", "readings": [{}]}',  # invalid UTF-8 inside a string
    b'{"schema": "1", "device": "edge-1", "readings": [{}]}',
    b'{"schema": 1, "device": 5, "readings": [{}]}',
    b'{"schema": 1, "device": "edge-1", "readings": [{"seq": NaN}]}',  # NaN is not JSON
    b'{"schema": 1, "device": "edge-1", "readings": [1, 2}',
    b"7",
    b'{"schema": 1, "device": "edge-1", "readings": [{"seq": 1, "sensor": "s", "metric": "m",'
    b' "value": 1e400, "unit": "C", "ts": 1.8e9}]}',  # a double out of range: one bad reading
]

MALFORMED_READINGS: list[Any] = [
    "a string",
    7,
    {"sensor": "sim", "metric": "t", "value": 1.0, "unit": "C", "ts": T0},  # no seq
    {**reading(1, T0), "seq": -1},
    {**reading(1, T0), "seq": 1.5},
    {**reading(1, T0), "seq": "5"},
    {**reading(1, T0), "seq": True},
    {**reading(1, T0), "sensor": ""},
    {**reading(1, T0), "sensor": 5},
    {**reading(1, T0), "metric": "has space"},
    {**reading(1, T0), "unit": "x" * 17},
    {**reading(1, T0), "unit": None},
    {**reading(1, T0), "value": "12.5"},
    {**reading(1, T0), "value": None},
    {**reading(1, T0), "value": True},
    {**reading(1, T0), "ts": 12},
    {**reading(1, T0), "ts": "2026-01-01"},
    {**reading(1, T0), "seq": 2**63},
    {**reading(1, T0), "seq": None},
    {**reading(1, T0), "value": 10**400},
    {**reading(1, T0), "sensor": {"nested": "object"}},
    {**reading(1, T0), "metric": ["list"]},
    {"seq": 1, "sensor": "sim"},  # lacks metric, value, unit, ts: the first is named
    [],
    None,
]

# Version 2's own ways to break its ts (integer milliseconds), each in a version 2 record.
MALFORMED_V2_READINGS: list[Any] = [
    {**reading(1, T0), "ts": T0},  # seconds, as version 1 wrote them
    {**reading(1, T0), "ts": T0 * 1000 + 0.5},  # milliseconds, not an integer
    {**reading(1, T0), "ts": int(T0 * 1000) * 1000},  # microseconds: past 2100
    {**reading(1, T0), "ts": 12},
    {**reading(1, T0), "ts": "1795000000000"},
    {**reading(1, T0), "ts": 10**30},
    {**reading(1, T0), "ts": True},
]
