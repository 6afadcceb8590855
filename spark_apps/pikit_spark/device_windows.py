"""Per-device event time: each device's windows close on the device's own clock.

Spark's watermark is global: one device that keeps sending moves it on, and another
device's readings spooled during an outage arrive "late" and are lost. Here the stream
is stateless and each micro-batch advances a state of our own (pikit_spark/state.py):

- `windows`: the open windows, as count/mean/M2/min/max per device x sensor x metric x
  window (merged batch by batch with Chan's formulas, so the result is exact);
- `devices`: per device, the highest `seq` seen (a reading at or below it is a resend and
  is dropped: one row per device, not one per reading), its highest event time, and
  `closed_through`, the window end up to which its windows are closed.

Each micro-batch is read once, into a summary whose size follows the windows and the
devices, not the readings (`summarize`). The task that holds a readings partition folds its
partition's summary into that partition's state (`fold`, in plain Python: pikit_spark/
window_fold.py, partition_fold.py). pikit_testkit's driver_fold folds a whole batch's summary
on the driver, as the app did until 2026-12-04: the model the tasks are checked against.

A device's windows close when its own event time passes their end by `slack_s`, or when
the processing time passes their end by `horizon_s` (a device silent for longer). A
reading for a closed window is late: it is returned with its reason, never dropped
silently. The processing time is the micro-batch's (kept in Spark's offset log), so a
replayed batch computes the same result.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pikit_contract.readings import Reading, encode_batch
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from pikit_spark.batch_values import at_most, whole_seconds
from pikit_spark.moments import aggregates, pool
from pikit_spark.seqs import (
    BLOCK_KEY,
    above_marks,
    at_or_below,
    block_aggregates,
    block_columns,
)
from pikit_spark.sink import Record
from pikit_spark.state import TableRow, Tables, columns

WINDOWS_SCHEMA = (
    "device string, sensor string, metric string, unit string, window_start long, "
    "n long, mean double, m2 double, min double, max double"
)
DEVICES_SCHEMA = "device string, high_seq long, high_ts double, closed_through long"
STATE_SCHEMAS = {"windows": WINDOWS_SCHEMA, "devices": DEVICES_SCHEMA}
WINDOW_KEY = ["device", "sensor", "metric", "window_start"]
LATE_CLOSED = "late: the device's windows up to this one were closed"
LATE_HORIZON = "late: older than the horizon"


@dataclass(frozen=True)
class Timing:
    window_s: int = 60
    slack_s: int = 10  # a device's readings may go this far back in time and still count
    horizon_s: int = 24 * 3600  # how long a silent device's windows wait for it

    def floor(self, seconds: Column) -> Column:
        return (F.floor(seconds / self.window_s) * self.window_s).cast("long")


@dataclass(frozen=True)
class Advance:
    """What one micro-batch produced of a partition's state (or, in the driver's model, of all of it)."""

    closed: list[dict[str, Any]]  # windows closed now: CLOSED_SCHEMA's columns
    late: list[dict[str, Any]]  # device, seq, sensor, metric, value, unit, ts, reason
    dead: list[dict[str, Any]]  # key, value, reason, topic, partition, offset, index
    state: Tables  # the next version of STATE_SCHEMAS


# The kinds of row in a batch's summary (see summarize).
ON_TIME, LATE, DEAD = "window", "late", "dead"
_DEAD_COLUMNS = {
    "key": "binary",
    "record": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "long",
    "index": "int",
}


def undecided(fetched: list[Row], devices: list[TableRow], timing: Timing) -> set[str]:
    """The devices whose rows, summarized without their marks, may be wrong: a seq at or below
    the device's high-water mark (a resend), or a window that the device had closed (its
    readings are late for that reason). Every other row is what the marks would have made it."""
    high_seq = {device: seq for device, seq, _, _ in devices}
    closed_through = {device: closed for device, _, _, closed in devices}
    found = set()
    for row in fetched:
        device = row["device"]
        if device not in high_seq:
            continue  # a dead letter (no device), or a device not seen before
        # Late by the horizon alone may be late as closed too, which the reason names first.
        through = closed_through[device]
        closed = through is not None and row["window_start"] + timing.window_s <= through
        if closed or at_or_below(high_seq, device, row["low_seq"]):
            found.add(device)
    return found


def horizon_at(processed_at: float, timing: Timing) -> int:
    """Windows ending by then close, however silent their device."""
    w = timing.window_s
    return int((processed_at - timing.horizon_s) // w * w)


def idle_through(state: Tables) -> float:
    """The horizon's end up to which a fold of nothing (a batch that read nothing) leaves `state`
    as it is and closes nothing: the lowest of its devices' closed-through (infinite with none).
    Without readings a device's windows close only when the horizon passes its closed-through,
    which `fold` made at least as late as its readings' clock."""
    return min((closed for *_, closed in state["devices"]), default=math.inf)


def fold(summary: list[Row], state: Tables, processed_at: float, timing: Timing) -> Advance:
    """The batch's summary rows (kinds "window", "late" and "dead") into the state before it."""
    w = timing.window_s
    horizon_end = horizon_at(processed_at, timing)
    windows = {tuple(row[i] for i in _KEY_AT): _Window.of(row) for row in state["windows"]}
    batch: dict[tuple[Any, ...], _Window] = {}
    seen: dict[str, tuple[int, float]] = {}
    late, dead = [], []
    for row in summary:
        if row["kind"] == DEAD:
            at = row["dead_at"]
            dead.append({"value": row["record"], "key": row["key"], "reason": row["reason"], **at.asDict()})
            continue
        device = row["device"]
        seq, ts = seen.get(device, (row["high_seq"], row["high_ts"]))
        seen[device] = (max(seq, row["high_seq"]), max(ts, row["high_ts"]))
        if row["kind"] == LATE:
            late.append(
                {
                    **{c: row[c] for c in ("device", "sensor", "metric", "unit", "reason")},
                    **{"seq": row["high_seq"], "value": row["min"], "ts": row["high_ts"]},
                }
            )
            continue
        # A window's readings in more than one unit are more than one row: pooled here.
        part = _Window(row["unit"], row["n"], row["mean"], row["m2"], row["min"], row["max"])
        key = tuple(row[c] for c in WINDOW_KEY)
        batch[key] = batch[key].pooled(part, unit=max(batch[key].unit, part.unit)) if key in batch else part
    for key, part in batch.items():
        windows[key] = windows[key].pooled(part, unit=windows[key].unit) if key in windows else part

    marks = {device: (seq, ts, closed) for device, seq, ts, closed in state["devices"]}
    for device, (seq, ts) in seen.items():
        old_seq, old_ts, old_closed = marks.get(device, (seq, ts, None))
        marks[device] = (max(seq, old_seq), max(ts, old_ts), old_closed)
    devices = []
    for device, (seq, ts, old_closed) in sorted(marks.items()):
        by_clock = math.floor((ts - timing.slack_s) / w) * w
        closes = max(c for c in (old_closed, by_clock, horizon_end) if c is not None)
        devices.append((device, seq, ts, closes))
    closed_through = {device: closed for device, _, _, closed in devices}

    closed, still_open = [], []
    for key, window in sorted(windows.items(), key=lambda item: (item[0][0], item[0][3], item[0][1:3])):
        device, sensor, metric, start = key
        if start + w <= closed_through[device]:
            closed.append(window.closed(device, sensor, metric, start, w))
        else:
            still_open.append(window.state_row(device, sensor, metric, start))
    return Advance(closed, late, dead, {"windows": still_open, "devices": devices})


_WINDOWS_COLUMNS = columns(WINDOWS_SCHEMA)
_KEY_AT = [_WINDOWS_COLUMNS.index(c) for c in WINDOW_KEY]


@dataclass(frozen=True)
class _Window:
    """One window's count/mean/M2/min/max (and unit), pooled exactly (Chan et al.)."""

    unit: str
    n: int
    mean: float
    m2: float
    min: float
    max: float

    @classmethod
    def of(cls, row: TableRow) -> _Window:
        named = dict(zip(_WINDOWS_COLUMNS, row, strict=True))
        return cls(named["unit"], named["n"], named["mean"], named["m2"], named["min"], named["max"])

    def pooled(self, other: _Window, unit: str) -> _Window:
        n, mean, m2 = pool((self.n, self.mean, self.m2), (other.n, other.mean, other.m2))
        return _Window(unit, int(n), mean, m2, min(self.min, other.min), max(self.max, other.max))

    def state_row(self, device: str, sensor: str, metric: str, start: int) -> TableRow:
        named = {"device": device, "sensor": sensor, "metric": metric, "window_start": start, **vars(self)}
        return tuple(named[c] for c in _WINDOWS_COLUMNS)

    def closed(self, device: str, sensor: str, metric: str, start: int, width: int) -> dict[str, Any]:
        return {
            "device": device,
            "sensor": sensor,
            "metric": metric,
            "unit": self.unit,
            "window_start": start,
            "window_end": start + width,
            "count": self.n,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "stddev": math.sqrt(max(self.m2 / self.n, 0.0)),
            "date": datetime.fromtimestamp(start, UTC).date(),
        }


def summarize(
    verdicts: DataFrame,
    marks: Mapping[str, tuple[int, int]],
    horizon_end: int,
    timing: Timing,
    *,
    seq_blocks: bool = True,
    by_partition: bool = False,
) -> DataFrame:
    """One pass over a batch's verdicts (or valid readings alone) -> a small frame, one row per:

    - window of the batch's on-time readings (kind "window"): device, sensor, metric,
      window_start, n, mean, m2, min, max, unit, and the highest seq and ts in it;
    - late reading (kind "late") and dead letter (kind "dead"), each a row of its own,
      with its reason (a dead letter's place in `dead_at`: topic, partition, offset, index);
    - with `seq_blocks`, block of 64 seqs of a device (kind null): n readings and a bit per
      seq seen (pikit_spark/seqs.py). Without `by_partition`, the summary is the driver's
      model's (pikit_testkit/driver_fold.py); the app's tasks take `by_partition`'s.

    `by_partition` keeps each readings partition's rows apart, for the task that folds that
    partition (pikit_spark/partition_fold.py): every row also carries its `partition` and its
    `route` (which `partition_fold.route` made and spread the verdicts by), and the
    seq blocks are not rows of their own but columns of the others (`seq_block`, `seq_bits`),
    one row per window x block, which `seqs.repeating` reads. So the summary is one grouping
    of the verdicts as the route left them: a grouping set would shuffle them again, away from
    the task that holds the partition.

    Resends of a seq at or below the device's high-water mark (`marks`: a device's high seq
    and the window end through which it is closed) are dropped here. The marks are few and
    go into the plan as a literal: no per-reading row crosses the network, and
    Spark's partial aggregation folds the readings into these rows where they are read.
    """
    # A dead letter has no device: kept.
    rows = above_marks(_as_verdicts(verdicts), marks, names=("high_seq", "was_closed"))
    plan = _summary_plan(
        horizon_end, timing, marked=bool(marks), seq_blocks=seq_blocks, by_partition=by_partition
    )
    keyed = rows.select(*plan.keyed)
    grouped = (
        keyed.groupingSets(plan.grouping_sets, *plan.grouped)
        if plan.grouping_sets
        else keyed.groupBy(*plan.grouped)
    )
    return grouped.agg(*plan.aggregates)


@dataclass(frozen=True)
class _SummaryPlan:
    """The summary's columns: `keyed` selected from the verdicts, grouped by `grouped` (in
    `grouping_sets` when given), into `aggregates`."""

    keyed: list[Column]
    grouping_sets: list[list[Column]]
    grouped: list[Column]
    aggregates: list[Column]


# Each PySpark function is a round trip to the driver's JVM, and the summary's columns took
# some 330 of them (a steady batch's advance made 496, now 163: a unit test counts them). They
# depend on the batch only through the late horizon, which moves once a window: built once per
# horizon.
@functools.lru_cache(maxsize=4)
def _summary_plan(
    horizon_end: int, timing: Timing, *, marked: bool, seq_blocks: bool, by_partition: bool = False
) -> _SummaryPlan:
    was_closed = F.col("was_closed") if marked else F.lit(None)
    window_start = timing.floor(F.col("ts"))
    window_end = window_start + timing.window_s
    closed_before = F.coalesce(window_end <= was_closed, F.lit(False))
    too_old = at_most(window_end, whole_seconds(horizon_end))
    late_reason = F.when(closed_before, F.lit(LATE_CLOSED)).when(too_old, F.lit(LATE_HORIZON))
    dead = F.col("reason").isNotNull()
    kind = F.when(dead, F.lit(DEAD)).when(late_reason.isNotNull(), F.lit(LATE)).otherwise(F.lit(ON_TIME))
    keyed = [
        *(F.col(c) for c in ("device", "seq", "sensor", "metric", "value", "unit", "ts")),
        kind.alias("kind"),
        window_start.alias("window_start"),
        F.coalesce(F.col("reason"), late_reason).alias("reason"),
        # A late reading and a dead letter are each a group of their own.
        F.when(kind == LATE, F.col("seq")).alias("late_seq"),
        F.when(dead, F.struct("topic", "partition", "offset", "index")).alias("dead_at"),
        *block_columns(~dead),
        F.when(dead, F.col("key")).alias("key"),
        F.when(dead, F.col("record")).alias("record"),
    ]
    # Every text and byte string is a key, so that each aggregate is a fixed-width number and
    # Spark aggregates in a hash map; a text aggregate (max(unit)) would sort every reading.
    by_window = [
        F.col(c)
        for c in (
            "kind",
            "device",
            "sensor",
            "metric",
            "unit",
            "window_start",
            "reason",
            "late_seq",
            "dead_at",
            "key",
            "record",
        )
    ]
    aggregated = [
        *aggregates("value"),
        F.min("value").alias("min"),
        F.max("value").alias("max"),
        F.max("seq").alias("high_seq"),
        F.min("seq").alias("low_seq"),
        F.max("ts").alias("high_ts"),
        *block_aggregates(),
    ]
    if by_partition:
        routed = [F.col("partition"), F.col("route")]  # partition_fold.route's
        return _SummaryPlan([*keyed, *routed], [], [*by_window, *routed, F.col("seq_block")], aggregated)
    if seq_blocks:
        blocks = [F.col(c) for c in BLOCK_KEY]
        return _SummaryPlan(keyed, [by_window, blocks], [*by_window, F.col("seq_block")], aggregated)
    no_block = F.lit(None).cast("long").alias("seq_block")
    return _SummaryPlan(keyed, [], [*by_window, no_block], aggregated)


def _as_verdicts(rows: DataFrame) -> DataFrame:
    """parse()'s verdicts as they are, or valid readings alone with the dead-letter columns null."""
    if "reason" in rows.columns:
        return rows
    missing = [F.lit(None).cast(ddl).alias(name) for name, ddl in _DEAD_COLUMNS.items()]
    return rows.select(*rows.columns, F.lit(None).cast("string").alias("reason"), *missing)


def late_records(late: list[dict[str, Any]]) -> list[Record]:
    """Late readings as Kafka records of the reading contract (one reading each, in the
    agent's own form), keyed by device, with the reason as a header: replayable by anything
    that reads the readings."""
    fields = ("device", "seq", "sensor", "metric", "value", "unit", "ts")
    return [
        (
            r["device"].encode(),
            encode_batch(r["device"], [Reading(*(r[f] for f in fields))]),
            [("reason", r["reason"].encode())],
        )
        for r in late
    ]
