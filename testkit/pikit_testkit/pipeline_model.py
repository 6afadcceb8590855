"""What the Spark apps must output, computed in plain Python (no Spark) from the raw topic.

The molecule verifier of the spark role and the end-to-end fault suite both judge the
cluster's output against this model. It knows what sensor_aggregates knows:

- a record not signed by the device it claims (pikit_contract/signing.py), when the apps
  check signatures (`authentic`), is a dead letter;
- a record or reading that breaks the contract, or is stamped more than the clock skew
  ahead of processing, is a dead letter (the record as sent, once per broken record and
  once per broken reading of an otherwise valid record);
- a reading at or below its device's highest `seq` so far is a duplicate (a resend);
- each device's windows close on the device's own event time: a window is closed once
  the device's highest `ts` passes its end by the slack, and a reading for a window
  closed before it arrived is late.

Spark decides per micro-batch and the model per reading, so the two agree when a late
reading arrives in a later micro-batch than the readings that closed its window: the
tests make sure of that (they wait for the window's aggregate before sending late ones).
Readings are taken in the order given, which must be each partition's offset order (a
device's records all go to one partition).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pikit_contract.readings import ContractError, Reading, decode_envelope, validate_reading
from pikit_contract.signing import forged_reason, misplaced_reason, verdict

WindowKey = tuple[str, str, str, int]  # device, sensor, metric, window start (Unix seconds)
Stats = tuple[int, float, float, float, float]  # count, min, max, mean, population stddev


@dataclass(frozen=True)
class Timing:
    window_s: int = 60
    slack_s: int = 10
    max_clock_skew_s: int = 300

    def start(self, ts: float) -> int:
        return int(ts // self.window_s * self.window_s)


@dataclass
class Outcome:
    """What sensor_aggregates must have produced from a stream."""

    windows: dict[WindowKey, Stats]  # closed windows: exactly these in the aggregates topic
    open_windows: set[WindowKey]  # still waiting for their device
    late: list[Reading]  # in the late-data topic
    dead: list[bytes]  # in the dead-letter topic
    readings: int  # valid readings in the raw topic, duplicates included
    duplicates: int
    devices: dict[str, list[int]] = field(default_factory=dict)  # device -> its distinct seqs, sorted

    def counts(self) -> str:
        in_windows = sum(stats[0] for stats in self.windows.values())
        return (
            f"{self.readings} valid readings in the raw topic, {self.duplicates} duplicates dropped, "
            f"{in_windows} in {len(self.windows)} closed windows, {len(self.open_windows)} windows open, "
            f"{len(self.late)} late, {len(self.dead)} dead letters"
        )

    def seq_gaps(self, device: str) -> list[tuple[int, int]]:
        """(after, before) around every missing run of the device's seqs."""
        seqs = self.devices.get(device, [])
        return [(a, b) for a, b in itertools.pairwise(seqs) if b != a + 1]


Headers = list[tuple[str, bytes]]


def authentic(
    records: Iterable[tuple[bytes, Headers, int]], keys: Mapping[str, bytes], partitions: int
) -> tuple[list[bytes], list[bytes]]:
    """The values that the apps read (validly signed by the device they claim, in its partition
    of the readings topic's `partitions`, or not JSON enough to claim one), and those that they
    dead-letter for their signature or their place. `records`: (value, headers, partition)."""
    kept: list[bytes] = []
    refused: list[bytes] = []
    for value, headers, partition in records:
        reason, signer = verdict(value, headers, keys)
        if reason is None:
            try:
                device = decode_envelope(value).device
            except ContractError:
                device = None  # a dead letter for its contract reason
            if device is not None:
                reason = forged_reason(signer, device) or misplaced_reason(signer, partition, partitions)
        (refused if reason else kept).append(value)
    return kept, refused


def split_records(
    values: Iterable[bytes], now: float | None = None, max_clock_skew_s: int = 300
) -> tuple[list[Reading], list[bytes]]:
    """Valid readings, and the dead letters' expected values. With `now`, a reading stamped
    more than the skew ahead of it is a dead letter (tests keep such readings unambiguous:
    far ahead of any processing time)."""
    readings: list[Reading] = []
    dead: list[bytes] = []
    for value in values:
        try:
            device, raws, schema = decode_envelope(value)
        except ContractError:
            dead.append(value)
            continue
        for raw in raws:
            try:
                reading = validate_reading(device, raw, schema)
            except ContractError:
                dead.append(value)
                continue
            if now is not None and reading.ts > now + max_clock_skew_s:
                dead.append(value)
            else:
                readings.append(reading)
    return readings, dead


def outcome(
    values: Iterable[bytes], now: float, timing: Timing = Timing(), refused: Iterable[bytes] = ()
) -> Outcome:
    """Replay the raw topic through sensor_aggregates' rules (`refused`: what `authentic` refused)."""
    readings, dead = split_records(values, now, timing.max_clock_skew_s)
    dead = [*refused, *dead]
    high_seq: dict[str, int] = {}
    high_ts: dict[str, float] = {}
    values_of: dict[WindowKey, list[float]] = defaultdict(list)
    late: list[Reading] = []
    seqs: dict[str, set[int]] = defaultdict(set)
    duplicates = 0
    for r in readings:
        if r.seq <= high_seq.get(r.device, -1):
            duplicates += 1
            continue
        seqs[r.device].add(r.seq)
        high_seq[r.device] = r.seq
        start = timing.start(r.ts)
        if r.device in high_ts and start + timing.window_s <= _closed_through(high_ts[r.device], timing):
            late.append(r)
        else:
            values_of[(r.device, r.sensor, r.metric, start)].append(r.value)
        high_ts[r.device] = max(high_ts.get(r.device, r.ts), r.ts)
    windows: dict[WindowKey, Stats] = {}
    open_windows: set[WindowKey] = set()
    for key, v in values_of.items():
        if key[3] + timing.window_s <= _closed_through(high_ts[key[0]], timing):
            windows[key] = (len(v), min(v), max(v), statistics.fmean(v), statistics.pstdev(v))
        else:
            open_windows.add(key)
    return Outcome(
        windows, open_windows, late, dead, len(readings), duplicates, {d: sorted(s) for d, s in seqs.items()}
    )


def _closed_through(high_ts: float, timing: Timing) -> int:
    return timing.start(high_ts - timing.slack_s)


def aggregate_of(value: bytes) -> tuple[WindowKey, Stats]:
    doc: dict[str, Any] = json.loads(value)
    key = (doc["device"], doc["sensor"], doc["metric"], int(doc["window_start"]))
    return key, (doc["count"], doc["min"], doc["max"], doc["mean"], doc["stddev"])


def same_stats(a: Stats, b: Stats) -> bool:
    """Counts equal; floats equal up to summation order (Spark adds partition by partition)."""
    return a[0] == b[0] and all(
        math.isclose(x, y, rel_tol=1e-7, abs_tol=1e-9) for x, y in zip(a[1:], b[1:], strict=True)
    )


def compare(
    expected: dict[WindowKey, Stats], aggregate_values: Iterable[bytes], complete: bool = True
) -> list[str]:
    """Every difference between the model and the aggregates topic; empty when they agree.

    With `complete=False` the topic may also hold windows the model does not know yet (read
    from a stream that went on after the raw topic was read), each still emitted once."""
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
        if complete or len(got[key]) > 1:
            problems.append(f"unexpected window {key}: {got[key]}")
    return problems


def late_of(value: bytes) -> tuple[str, int]:
    """(device, seq) of a late-data record (one reading each)."""
    doc = json.loads(value)
    (reading,) = doc["readings"]
    return doc["device"], int(reading["seq"])


def compare_late(expected: list[Reading], late_values: Iterable[bytes]) -> list[str]:
    want = sorted((r.device, r.seq) for r in expected)
    have = sorted(late_of(v) for v in late_values)
    if want == have:
        return []
    return [f"late readings: expected {len(want)} {want[:10]}..., got {len(have)} {have[:10]}..."]
