"""What the Spark apps must output, computed in plain Python (no Spark) from what was sent.

The molecule verifier of the spark role and the end-to-end test both judge the cluster's
output against this model.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from edge_agent.contract import ContractError, Reading, decode_envelope, validate_reading

WindowKey = tuple[str, str, str, int]  # device, sensor, metric, window start (Unix seconds)
Stats = tuple[int, float, float, float, float]  # count, min, max, mean, population stddev


def split_records(values: Iterable[bytes]) -> tuple[list[Reading], list[bytes]]:
    """Valid readings, and the dead letters' expected values: the record as sent, once per
    broken record and once per broken reading of an otherwise valid record."""
    readings: list[Reading] = []
    dead: list[bytes] = []
    for value in values:
        try:
            device, raws = decode_envelope(value)
        except ContractError:
            dead.append(value)
            continue
        for raw in raws:
            try:
                readings.append(validate_reading(device, raw))
            except ContractError:
                dead.append(value)
    return readings, dead


def expected_windows(readings: Iterable[Reading], window_s: int = 60) -> dict[WindowKey, Stats]:
    """Windowed statistics of the readings, each (device, seq) counted once."""
    seen: set[tuple[str, int]] = set()
    values: dict[WindowKey, list[float]] = defaultdict(list)
    for r in readings:
        if (r.device, r.seq) in seen:
            continue
        seen.add((r.device, r.seq))
        start = int(r.ts // window_s * window_s)
        values[(r.device, r.sensor, r.metric, start)].append(r.value)
    return {
        key: (len(v), min(v), max(v), statistics.fmean(v), statistics.pstdev(v)) for key, v in values.items()
    }


def aggregate_of(value: bytes) -> tuple[WindowKey, Stats]:
    doc: dict[str, Any] = json.loads(value)
    key = (doc["device"], doc["sensor"], doc["metric"], int(doc["window_start"]))
    return key, (doc["count"], doc["min"], doc["max"], doc["mean"], doc["stddev"])


def same_stats(a: Stats, b: Stats) -> bool:
    """Counts equal; floats equal up to summation order (Spark adds partition by partition)."""
    return a[0] == b[0] and all(
        math.isclose(x, y, rel_tol=1e-7, abs_tol=1e-9) for x, y in zip(a[1:], b[1:], strict=True)
    )


def compare(expected: dict[WindowKey, Stats], aggregate_values: Iterable[bytes]) -> list[str]:
    """Every difference between the model and the aggregates topic; empty when they agree."""
    problems: list[str] = []
    got: dict[WindowKey, list[Stats]] = defaultdict(list)
    for value in aggregate_values:
        key, stats = aggregate_of(value)
        got[key].append(stats)
    for key, want in sorted(expected.items()):
        have = got.get(key, [])
        if not have:
            problems.append(f"missing window {key}: expected {want}")
        elif len(have) > 1:
            problems.append(f"window {key} emitted {len(have)} times: {have}")
        elif not same_stats(have[0], want):
            problems.append(f"window {key}: got {have[0]}, expected {want}")
    for key in sorted(set(got) - set(expected)):
        problems.append(f"unexpected window {key}: {got[key]}")
    return problems
