"""Alerts for readings outside fixed thresholds or far from their rolling baseline.

The baseline is Welford's running count/mean/M2 per device x sensor x metric, its count
capped at `baseline_n` so that old readings fade out (a rolling baseline). It lives on
the shared storage, one version per micro-batch (pikit_spark/state.py): a batch replayed
after a crash reads the version before it and writes its own again, so the baseline
never counts a reading twice. Readings are judged against the baseline as it was when their
micro-batch started.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from pikit_spark.lookup import looked_up
from pikit_spark.moments import Moments, aggregates, pool
from pikit_spark.presence import PRESENCE_SCHEMA
from pikit_spark.seqs import (
    BLOCK_KEY,
    above_marks,
    at_or_below,
    block_aggregates,
    block_columns,
    once_per_seq,
)
from pikit_spark.sink import Record
from pikit_spark.state import TableRow, Tables

ALERT_SCHEMA_VERSION = 1
KEY = ["device", "sensor", "metric"]


@dataclass(frozen=True)
class Threshold:
    sensor: str
    metric: str
    low: float | None
    high: float | None

    @classmethod
    def parse(cls, text: str) -> Threshold:
        """`sensor.metric=low:high`, either bound may be empty: `cpu.temperature=:80`."""
        try:
            name, bounds = text.split("=", 1)
            sensor, metric = name.split(".", 1)
            low, high = bounds.split(":", 1)
            threshold = cls(sensor, metric, float(low) if low else None, float(high) if high else None)
        except ValueError:
            raise ValueError(
                f"threshold {text!r}: expected sensor.metric=low:high, e.g. cpu.temperature=:80"
            ) from None
        if threshold.low is None and threshold.high is None:
            raise ValueError(f"threshold {text!r}: give at least one bound")
        return threshold


@dataclass(frozen=True)
class Rules:
    thresholds: tuple[Threshold, ...]
    k: float = 4.0  # standard deviations
    min_samples: int = 30  # a baseline younger than this raises no alert
    baseline_n: int = 1000  # how many readings the rolling baseline remembers


def _threshold_reason(rules: Rules) -> Column:
    reason = F.lit(None).cast("string")
    for t in reversed(rules.thresholds):
        match = (F.col("sensor") == t.sensor) & (F.col("metric") == t.metric)
        if t.low is not None:
            reason = F.when(match & (F.col("value") < t.low), F.lit(f"below {t.low:g}")).otherwise(reason)
        if t.high is not None:
            reason = F.when(match & (F.col("value") > t.high), F.lit(f"above {t.high:g}")).otherwise(reason)
    return reason


def alerts(readings: DataFrame, baseline: list[TableRow], rules: Rules) -> DataFrame:
    """Readings that break a threshold or lie more than k stddevs from the baseline's mean
    (`baseline`: BASELINE_SCHEMA's rows)."""
    judged = _judged(readings, _by_key(baseline), rules)
    return judged.where(F.col("reason").isNotNull()).select(
        *KEY,
        "seq",
        "value",
        "unit",
        "ts",
        "reason",
        F.col("mean").alias("baseline_mean"),
        F.col("stddev").alias("baseline_stddev"),
    )


@dataclass(frozen=True)
class Judged:
    """What one micro-batch produced, on the driver."""

    alerts: list[dict[str, Any]]  # `alerts`' columns
    state: Tables  # the next version of STATE_SCHEMAS, presence unchanged
    seen: frozenset[str]  # the devices with fresh readings in the batch


# The kinds of row in a batch's summary (see _summarize).
_BASELINE, _ALERT = "baseline", "alert"
_ALERT_COLUMNS = ["seq", "value", "unit", "ts", "reason", "baseline_mean", "baseline_stddev"]
BASELINE_SCHEMA = "device string, sensor string, metric string, n double, mean double, m2 double"
DEVICES_SCHEMA = "device string, high_seq long"
# The device x sensor x metric whose last reading was out of bounds: an excursion under way.
EXCURSIONS_SCHEMA = "device string, sensor string, metric string"
STATE_SCHEMAS = {
    "baseline": BASELINE_SCHEMA,
    "devices": DEVICES_SCHEMA,
    "excursions": EXCURSIONS_SCHEMA,
    "presence": PRESENCE_SCHEMA,
}


def judge(readings: DataFrame, state: Tables, rules: Rules) -> Judged:
    """One micro-batch of valid readings and the state before it (the last committed batch's) ->
    the alerts, the next baseline and seq marks.

    The batch is read once, into a summary whose size follows the baseline's keys and the
    alerts, not the readings: per device x sensor x metric the batch's count/mean/M2, highest
    seq and lowest and highest value, and a row per threshold alert. It is fetched to the
    driver in the same Spark job and folded into the state there. That read joins neither the
    baseline nor the devices' seq marks (each would be a broadcast, a Spark job of its own in
    every batch); the driver finds the devices whose rows they may change (`undecided`), and
    only those are read again, with the marks and baseline of those devices in the plan. Each
    reading counts once (pikit_spark/seqs.py)."""
    marks: dict[str, int] = dict(state["devices"])
    baseline = _by_key(state["baseline"])

    def undecided(fetched: list[Row]) -> set[str]:
        """The devices with a reading at or below their seq mark (a resend), an alert (whose
        record carries its baseline), or a value that may lie k stddevs from its baseline."""
        found = set()
        for row in fetched:
            device = row["device"]
            resent = at_or_below(marks, device, row["low_seq"])
            if resent or row["kind"] == _ALERT:
                found.add(device)
            elif row["kind"] == _BASELINE:
                moments = baseline.get((device, row["sensor"], row["metric"]))
                if _may_deviate(moments, (row["value"], row["max_value"]), rules):
                    found.add(device)
        return found

    def known(devices: list[str]) -> _Known:
        chosen = set(devices)
        return _Known(
            {d: seq for d, seq in marks.items() if d in chosen},
            {key: moments for key, moments in baseline.items() if key[0] in chosen},
        )

    summary = once_per_seq(
        _summarize(readings, None, rules, seq_blocks=True),
        readings,
        lambda again, devices: _summarize(again, known(devices), rules, seq_blocks=False),
        undecided=undecided,
    )
    out = [{c: row[c] for c in (*KEY, *_ALERT_COLUMNS)} for row in summary if row["kind"] == _ALERT]
    calm = {
        tuple(row[c] for c in KEY): (row["first_calm_seq"], row["calm_seq"])
        for row in summary
        if row["kind"] == _BASELINE and row["calm_seq"] is not None
    }
    found, excursions = excursion_starts(out, calm, state.get("excursions", []))
    for row in summary:
        if row["kind"] != _BASELINE:
            continue
        key = (row["device"], row["sensor"], row["metric"])
        batch = (float(row["n"]), row["mean"], row["m2"])
        baseline[key] = _capped(pool(baseline[key], batch) if key in baseline else batch, rules)
        marks[row["device"]] = max(row["high_seq"], marks.get(row["device"], row["high_seq"]))
    baseline_rows: list[TableRow] = [(*key, *kept) for key, kept in sorted(baseline.items())]
    seen = frozenset(row["device"] for row in summary if row["kind"] == _BASELINE)
    # Presence is the app's to advance (pikit_spark/presence.py): passed on as it was.
    tables: Tables = {
        "baseline": baseline_rows,
        "devices": sorted(marks.items()),
        "excursions": excursions,
        "presence": state.get("presence", []),
    }
    return Judged(found, tables, seen)


def excursion_starts(
    out: list[dict[str, Any]], calm: dict[tuple[Any, ...], tuple[int, int]], open_before: list[TableRow]
) -> tuple[list[dict[str, Any]], list[TableRow]]:
    """One alert per excursion, not one per reading: the batch's out-of-bounds readings, the
    first and last in-bounds seqs of each key that has one in the batch, and the excursions
    under way before it -> the alerts that start an excursion (its first reading out, with how
    many of the batch's readings were out) and the excursions under way after it.

    An excursion ends with a reading back within bounds. A key raises at most one alert a
    micro-batch, at its first reading out that does not continue an excursion under way before
    the batch: one under way goes on until the batch's first reading back, and a reading out
    after that starts the next. Past that, within one batch, excursions count once, whatever
    happened between their readings."""
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for alert in out:
        by_key.setdefault(tuple(alert[c] for c in KEY), []).append(alert)
    under_way = {tuple(row) for row in open_before}
    starts = []
    for key, alerts in sorted(by_key.items()):
        alerts.sort(key=lambda a: a["seq"])
        first_back, last_back = calm.get(key, (None, None))
        if key in under_way:  # it goes on until the batch's first reading back within bounds
            new = [a for a in alerts if first_back is not None and a["seq"] > first_back]
        else:
            new = alerts
        if new:
            starts.append({**new[0], "readings_out": len(alerts)})
        if last_back is None or last_back < alerts[-1]["seq"]:
            under_way.add(key)
        else:
            under_way.discard(key)
    for key in under_way - set(by_key):
        if key in calm:
            under_way.discard(key)  # only readings within bounds this batch: it ended
    return starts, sorted(under_way)


def _capped(baseline: Moments, rules: Rules) -> Moments:
    """The count capped at baseline_n, so that the baseline follows a slow drift."""
    n, mean, m2 = baseline
    scale = min(1.0, rules.baseline_n / n)
    return n * scale, mean, m2 * scale


@dataclass(frozen=True)
class _Known:
    """The seq marks and baseline of the devices that a batch reads again."""

    marks: dict[str, int]
    baseline: dict[tuple[str, str, str], Moments]


def _summarize(readings: DataFrame, known: _Known | None, rules: Rules, *, seq_blocks: bool) -> DataFrame:
    """A row per device x sensor x metric (kind "baseline"), per alert (kind "alert"), and, with
    `seq_blocks`, per block of 64 seqs of a device (kind null); numbers only as aggregates,
    so that Spark aggregates in a hash map. Without `known`, no reading is dropped as a resend
    and none is judged against a baseline: only thresholds alert."""
    if known is None:
        fresh = readings
    else:
        fresh = above_marks(readings, {device: (seq,) for device, seq in known.marks.items()})
    judged = _judged(fresh, None if known is None else known.baseline, rules)
    plan = _summary_plan(seq_blocks)
    keyed = judged.select(*plan.keyed)
    summary = keyed.groupingSets(plan.grouping_sets, *plan.grouped).agg(*plan.aggregates)
    return summary.where(plan.kept).select(*plan.out)


@dataclass(frozen=True)
class _SummaryPlan:
    """The summary's columns: `keyed` selected from the judged readings, grouped by `grouped`
    in `grouping_sets`, into `aggregates`; of those, the rows where `kept` holds, as `out`."""

    keyed: list[Column]
    grouping_sets: list[list[Column]]
    grouped: list[Column]
    aggregates: list[Column]
    kept: Column
    out: list[Column]


# Each PySpark function is a round trip to the driver's JVM: the summary's columns, the same in
# every micro-batch, are built once (pikit_spark/device_windows.py measured the cost).
@functools.cache
def _summary_plan(seq_blocks: bool) -> _SummaryPlan:
    alert = F.col("reason").isNotNull()
    keyed = [
        *(F.col(c) for c in (*KEY, "seq", "value", "ts")),
        F.lit(_BASELINE).alias("kind"),
        # An alert is also a group of its own (its reading still counts in the baseline).
        *(F.when(alert, F.col(c)).alias(f"a_{c}") for c in [*KEY, "seq", "unit", "reason"]),
        F.col("mean").alias("baseline_mean"),
        F.col("stddev").alias("baseline_stddev"),
        # The seq of a reading within its bounds: the first ends an excursion under way before
        # the batch, the last says whether one is under way after it.
        F.when(~alert, F.col("seq")).alias("calm"),
        *block_columns(F.lit(True)),
    ]
    by_key = [F.col(c) for c in ("kind", *KEY)]
    by_alert = [F.col(f"a_{c}") for c in [*KEY, "seq", "unit", "reason"]]
    blocks = [F.col(c) for c in BLOCK_KEY]
    sets = [by_key, by_alert, blocks] if seq_blocks else [by_key, by_alert]
    aggregated = [
        *aggregates("value"),
        F.max("seq").alias("high_seq"),
        F.min("seq").alias("low_seq"),
        F.min("calm").alias("first_calm_seq"),
        F.max("calm").alias("calm_seq"),
        F.min("value").alias("value"),
        F.max("value").alias("max_value"),
        F.min("ts").alias("ts"),
        F.min("baseline_mean").alias("baseline_mean"),
        F.min("baseline_stddev").alias("baseline_stddev"),
        *block_aggregates(),
    ]
    # The readings that raise no alert make one group of nulls in `by_alert`: dropped.
    is_alert = F.col("a_seq").isNotNull()
    kind = F.when(F.col("kind").isNotNull(), F.col("kind")).when(is_alert, F.lit(_ALERT))
    out = [
        kind.alias("kind"),
        *(F.coalesce(c, f"a_{c}").alias(c) for c in KEY),
        *(F.col(c) for c in ["seq_block", "n", "mean", "m2", "high_seq", "low_seq"]),
        *(F.col(c) for c in ["first_calm_seq", "calm_seq", "seq_bits"]),
        *(F.col(f"a_{c}").alias(c) for c in ("seq", "unit", "reason")),
        *(F.col(c) for c in ["value", "max_value", "ts", "baseline_mean", "baseline_stddev"]),
    ]
    kept = kind.isNotNull() | F.col("seq_block").isNotNull()
    return _SummaryPlan(keyed, sets, [*by_key, *by_alert, F.col("seq_block")], aggregated, kept, out)


_MOMENTS = "struct<n:double,mean:double,m2:double>"


def _judged(
    readings: DataFrame, baseline: dict[tuple[str, str, str], Moments] | None, rules: Rules
) -> DataFrame:
    """The readings beside their baseline (mean, stddev) and the reason they alert, or null.
    Without a baseline (None), only the thresholds alert."""
    # One step of plan (each is analyzed again, 30-60 ms on the lab): the baseline's fields
    # are read from the looked-up struct where they are used.
    if baseline is None:
        return readings.select(*readings.columns, *_thresholds_only(rules))
    moments = looked_up(readings, baseline, KEY, _MOMENTS, "_moments")
    n, mean, m2 = (F.col(f"_moments.{c}") for c in ("n", "mean", "m2"))
    stddev = F.sqrt(m2 / n)
    z = F.abs(F.col("value") - mean) / stddev
    deviation = F.when(
        (n >= rules.min_samples) & (stddev > 0) & (z > rules.k),
        F.format_string("%.1f standard deviations from the baseline mean %.3f", z, mean),
    )
    reason = F.coalesce(_threshold_reason(rules), deviation)
    return moments.select(
        *readings.columns, mean.alias("mean"), stddev.alias("stddev"), reason.alias("reason")
    )


@functools.lru_cache(maxsize=4)
def _thresholds_only(rules: Rules) -> list[Column]:
    """mean and stddev (null) and the reason, of a judgement without a baseline: the same in
    every micro-batch, so built once."""
    nulls = F.lit(None).cast("double")
    return [nulls.alias("mean"), nulls.alias("stddev"), _threshold_reason(rules).alias("reason")]


def _by_key(rows: list[TableRow]) -> dict[tuple[str, str, str], Moments]:
    return {(row[0], row[1], row[2]): (row[3], row[4], row[5]) for row in rows}


def _may_deviate(moments: Moments | None, values: tuple[float, float], rules: Rules) -> bool:
    """Whether a value between these two may lie more than k stddevs from the baseline's mean,
    as `_judged` decides it. The distance grows with the value on either side of the mean, so
    the lowest and highest values decide for all; the bound is a hair lower than `_judged`'s,
    so that no difference in rounding between Python and the JVM hides an alert."""
    if moments is None:
        return False
    n, mean, m2 = moments
    if n < rules.min_samples or m2 <= 0:
        return False
    stddev = math.sqrt(m2 / n)
    return any(abs(value - mean) / stddev > rules.k * (1 - 1e-9) for value in values)


def as_kafka_records(found: list[dict[str, Any]]) -> list[Record]:
    """Alerts keyed by device."""
    return [
        (
            alert["device"].encode(),
            json.dumps({"schema": ALERT_SCHEMA_VERSION, **alert}, separators=(",", ":")).encode(),
            [],
        )
        for alert in found
    ]
