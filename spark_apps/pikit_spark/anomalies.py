"""Alerts for readings outside fixed thresholds or far from their rolling baseline.

The baseline is the running count/mean/M2 per device x sensor x metric, its count capped at
`baseline_n` so that old readings fade out (a rolling baseline). It is state of the device's
readings partition, folded by the task that holds the partition (pikit_spark/alert_fold.py) and
committed with the batch's alerts: a batch done again after a crash starts from the state its
partition committed before it, so the baseline never counts a reading twice. Readings are judged
against the baseline as it was when their micro-batch started.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pikit_spark.moments import Moments, pool
from pikit_spark.presence import PRESENCE_SCHEMA
from pikit_spark.sink import Record
from pikit_spark.state import TableRow, Tables


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


# A valid reading as the judgement takes it: READING_COLUMNS first (a task's row has more).
Reading = Sequence[Any]
READING_COLUMNS = ("device", "sensor", "metric", "seq", "value", "unit", "ts")
ALERT_SCHEMA_VERSION = 1
KEY = ["device", "sensor", "metric"]
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


@dataclass(frozen=True)
class Judged:
    """What one micro-batch of some devices' readings produced."""

    alerts: list[dict[str, Any]]  # the excursions' first readings: the alerts topic's columns, readings_out
    state: Tables  # the next version of STATE_SCHEMAS, presence unchanged
    seen: frozenset[str]  # the devices with fresh readings in the batch


def judge(readings: Iterable[Reading], state: Tables, rules: Rules) -> Judged:
    """One micro-batch of valid readings (READING_COLUMNS, in any order) and their devices' state
    before it -> the alerts and the next baseline, seq marks and excursions.

    A reading at or below its device's seq mark is a resend, and a seq twice in the batch counts
    once (a device's readings arrive in seq order; a resend follows an agent's crash). Each fresh
    reading is judged against its key's baseline as the batch began; then the batch's readings
    of each key are pooled into it."""
    marks: dict[str, int] = dict(state["devices"])
    fresh: dict[tuple[str, int], Reading] = {}
    for reading in readings:
        device, seq = reading[0], reading[3]
        if device not in marks or seq > marks[device]:
            fresh.setdefault((device, seq), reading)
    baseline = {(row[0], row[1], row[2]): (row[3], row[4], row[5]) for row in state["baseline"]}
    limits = _limits(rules)
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    calm: dict[tuple[str, str, str], tuple[int, int]] = {}  # the first and last seq within bounds
    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for reading in fresh.values():
        device, sensor, metric, seq, value, unit, ts = reading[:7]
        key = (device, sensor, metric)
        values[key].append(value)
        moments = baseline.get(key)
        reason = _threshold_reason(limits.get((sensor, metric), ()), value)
        mean = stddev = None
        if moments is not None:
            n, mean, m2 = moments
            stddev = math.sqrt(m2 / n)
            if reason is None and n >= rules.min_samples and stddev > 0:
                z = abs(value - mean) / stddev
                if z > rules.k:
                    reason = f"{z:.1f} standard deviations from the baseline mean {mean:.3f}"
        if reason is None:
            first, last = calm.get(key, (seq, seq))
            calm[key] = (min(first, seq), max(last, seq))
        else:
            alert = {"device": device, "sensor": sensor, "metric": metric, "seq": seq, "value": value}
            alert |= {"unit": unit, "ts": ts, "reason": reason}
            out[key].append(alert | {"baseline_mean": mean, "baseline_stddev": stddev})
    found, excursions = excursion_starts(
        [alert for alerts in out.values() for alert in alerts], calm, state.get("excursions", [])
    )
    for key, batch in values.items():
        moments = _moments(batch)
        baseline[key] = _capped(pool(baseline[key], moments) if key in baseline else moments, rules)
    for device, seq in fresh:
        marks[device] = max(seq, marks.get(device, seq))
    tables: Tables = {
        "baseline": [(*key, *kept) for key, kept in sorted(baseline.items())],
        "devices": sorted(marks.items()),
        "excursions": excursions,
        # Presence is the fold's to advance (pikit_spark/presence.py): passed on as it was.
        "presence": state.get("presence", []),
    }
    return Judged(found, tables, frozenset(device for device, _ in fresh))


Limit = tuple[float | None, float | None]  # a threshold's low and high bounds


def _limits(rules: Rules) -> dict[tuple[str, str], list[Limit]]:
    """The thresholds by sensor and metric, in the order given: the first one broken names the reason."""
    limits: dict[tuple[str, str], list[Limit]] = defaultdict(list)
    for t in rules.thresholds:
        limits[(t.sensor, t.metric)].append((t.low, t.high))
    return limits


def _threshold_reason(limits: Iterable[Limit], value: float) -> str | None:
    for low, high in limits:
        if high is not None and value > high:
            return f"above {high:g}"
        if low is not None and value < low:
            return f"below {low:g}"
    return None


def _moments(values: list[float]) -> Moments:
    """n, mean and M2 of a key's readings in the batch."""
    n = len(values)
    mean = math.fsum(values) / n
    return float(n), mean, math.fsum((v - mean) ** 2 for v in values)


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
