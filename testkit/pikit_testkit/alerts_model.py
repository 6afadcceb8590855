"""What anomaly_alerts must output, computed in plain Python (no Spark) from the raw topic.

anomaly_alerts decides per micro-batch: a reading is judged against its key's baseline as it
was when the batch began, a key raises at most one excursion alert per batch, and a device is
silent or back at the batch's timestamp. So the model replays the app's committed batches, which
its batch log lists in order, whichever drivers ran them (`pikit-spark-anomaly_alerts-batches`:
the end offsets and the batch's timestamp, written in the batch's transaction). The app commits
each readings partition's share of a batch on its own, and logs each commit with that partition's
end; a partition that read nothing and raised nothing logs nothing. A logged batch is the raw
topic's records of its partitions between their previous ends and these, and the devices it
judges are those partitions' (a device's records all lie in one partition; one elsewhere is a
dead letter). The model keeps what the app keeps:

- per device, the highest seq counted: a reading at or below it is a resend, and a seq twice in
  one batch counts once;
- per device x sensor x metric, a baseline of count, mean and M2 (each batch's readings pooled
  in, the count then capped at `baseline_n`, M2 scaled with it);
- the keys whose last reading was out of bounds (an excursion under way);
- per device, when its readings last came, and whether it was found silent.

Written from the app's documented rules (spark_apps/README.md, pikit_spark/anomalies.py's and
presence.py's docstrings), not from its code, so that a slip in either shows as a difference.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pikit_contract.readings import Reading

from pikit_testkit.pipeline_model import split_records

AlertKey = tuple[
    Any, ...
]  # (device, sensor, metric, seq) of a reading's alert; (device, kind, ts) of presence


@dataclass(frozen=True)
class Batch:
    """One committed micro-batch of the app: its place in the batch log, timestamp (s) and each
    partition's end offset."""

    id: int
    timestamp: float
    ends: dict[int, int]

    @classmethod
    def logged(cls, position: int, value: bytes) -> Batch:
        """A record of the app's batch log (`pikit-spark-<app>-batches`, written in each batch's
        transaction): its timestamp and each readings partition's end offset."""
        doc = json.loads(value)
        return cls(position, float(doc["timestamp"]), {int(p): int(o) for p, o in doc["ends"].items()})


@dataclass(frozen=True)
class AlertRules:
    thresholds: tuple[tuple[str, str, float | None, float | None], ...]  # sensor, metric, low, high
    k: float = 4.0
    min_samples: int = 30
    baseline_n: int = 1000
    silent_after_s: float = 300.0
    max_clock_skew_s: int = 300

    @classmethod
    def from_strings(cls, thresholds: Iterable[str], **rest: Any) -> AlertRules:
        """`sensor.metric=low:high` as the inventory gives them (spark_anomaly_thresholds)."""
        parsed = []
        for text in thresholds:
            name, bounds = text.split("=", 1)
            sensor, metric = name.split(".", 1)
            low, high = bounds.split(":", 1)
            parsed.append((sensor, metric, float(low) if low else None, float(high) if high else None))
        return cls(tuple(parsed), **rest)

    def threshold_reason(self, r: Reading) -> str | None:
        """The first threshold of the reading's sensor and metric that it breaks."""
        for sensor, metric, low, high in self.thresholds:
            if (sensor, metric) != (r.sensor, r.metric):
                continue
            if high is not None and r.value > high:
                return f"above {high:g}"
            if low is not None and r.value < low:
                return f"below {low:g}"
        return None


@dataclass
class Baseline:
    n: float = 0.0
    mean: float = 0.0
    m2: float = 0.0

    def stddev(self) -> float:
        return math.sqrt(self.m2 / self.n)

    def add(self, values: list[float], cap: int) -> None:
        """Pool the batch's values in (Chan et al.), then cap the count (M2 scaled alike)."""
        n_b = len(values)
        mean_b = math.fsum(values) / n_b
        m2_b = math.fsum((v - mean_b) ** 2 for v in values)
        if self.n == 0:
            n, self.mean, self.m2 = float(n_b), mean_b, m2_b
        else:
            n = self.n + n_b
            delta = mean_b - self.mean
            self.mean = self.mean + delta * n_b / n
            self.m2 = self.m2 + m2_b + delta * delta * self.n * n_b / n
        scale = min(1.0, cap / n)
        self.n, self.m2 = n * scale, self.m2 * scale


@dataclass
class AlertsModel:
    rules: AlertRules
    high_seq: dict[str, int] = field(default_factory=dict)
    baselines: dict[tuple[str, str, str], Baseline] = field(default_factory=dict)
    under_way: set[tuple[str, str, str]] = field(default_factory=set)
    last_seen: dict[str, float] = field(default_factory=dict)
    silent: set[str] = field(default_factory=set)

    def batch(
        self, readings: Sequence[Reading], processed_at: float, devices: set[str] | None = None
    ) -> list[dict[str, Any]]:
        """One micro-batch's valid readings (offset order) -> the alerts it writes. With `devices`,
        the batch judges only those devices' presence (the partitions it logged)."""
        fresh: dict[tuple[str, int], Reading] = {}
        for r in readings:
            if r.seq > self.high_seq.get(r.device, -1):
                fresh.setdefault((r.device, r.seq), r)
        out: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
        calm: dict[tuple[str, str, str], tuple[int, int]] = {}  # the first and last seq within bounds
        values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for r in fresh.values():
            key = (r.device, r.sensor, r.metric)
            values[key].append(r.value)
            reason, mean, stddev = self._judge(r, self.baselines.get(key))
            if reason is None:
                first, last = calm.get(key, (r.seq, r.seq))
                calm[key] = (min(first, r.seq), max(last, r.seq))
            else:
                out[key].append(_reading_alert(r, reason, mean, stddev))
        found = self._excursion_starts(out, calm)
        for key, vs in values.items():
            self.baselines.setdefault(key, Baseline()).add(vs, self.rules.baseline_n)
        for device, seq in fresh:
            self.high_seq[device] = max(seq, self.high_seq.get(device, seq))
        return found + self._presence({device for device, _ in fresh}, processed_at, devices)

    def _judge(self, r: Reading, baseline: Baseline | None) -> tuple[str | None, float | None, float | None]:
        if baseline is None:
            return self.rules.threshold_reason(r), None, None
        stddev = baseline.stddev()
        reason = self.rules.threshold_reason(r)
        if reason is None and baseline.n >= self.rules.min_samples and stddev > 0:
            z = abs(r.value - baseline.mean) / stddev
            if z > self.rules.k:
                reason = f"{z:.1f} standard deviations from the baseline mean {baseline.mean:.3f}"
        return reason, baseline.mean, stddev

    def _excursion_starts(
        self,
        out: dict[tuple[str, str, str], list[dict[str, Any]]],
        calm: dict[tuple[str, str, str], tuple[int, int]],
    ) -> list[dict[str, Any]]:
        starts = []
        for key, alerts in sorted(out.items()):
            alerts.sort(key=lambda a: a["seq"])
            first_back, last_back = calm.get(key, (-1, -1))
            # An excursion under way goes on until the batch's first reading back within bounds.
            after = [a for a in alerts if key not in self.under_way or 0 <= first_back < a["seq"]]
            if after:
                starts.append({**after[0], "readings_out": len(alerts)})
            if last_back > alerts[-1]["seq"]:
                self.under_way.discard(key)
            else:
                self.under_way.add(key)
        self.under_way -= {key for key in calm if key not in out}
        return starts

    def _presence(self, seen: set[str], at: float, devices: set[str] | None) -> list[dict[str, Any]]:
        found = []
        judged = set(self.last_seen) if devices is None else set(self.last_seen) & devices
        for device in sorted(judged | seen):
            gap = at - self.last_seen.get(device, at)
            if device in seen:
                if device in self.silent:
                    found.append(_presence_alert(device, gap, at, f"back: readings again after {gap:.0f} s"))
                    self.silent.discard(device)
                self.last_seen[device] = at
            elif device not in self.silent and gap >= self.rules.silent_after_s:
                found.append(_presence_alert(device, gap, at, f"silent: no reading for {gap:.0f} s"))
                self.silent.add(device)
        return found


def _reading_alert(r: Reading, reason: str, mean: float | None, stddev: float | None) -> dict[str, Any]:
    return {
        "device": r.device,
        "sensor": r.sensor,
        "metric": r.metric,
        "seq": r.seq,
        "value": r.value,
        "unit": r.unit,
        "ts": r.ts,
        "reason": reason,
        "baseline_mean": mean,
        "baseline_stddev": stddev,
    }


def _presence_alert(device: str, gap: float, at: float, reason: str) -> dict[str, Any]:
    return {
        "device": device,
        "sensor": "agent",
        "metric": "presence",
        "seq": None,
        "value": round(gap, 1),
        "unit": "s",
        "ts": at,
        "reason": reason,
        "baseline_mean": None,
        "baseline_stddev": None,
    }


Record = tuple[int, int, bytes]  # partition, offset, value (authentic records only)


@dataclass(frozen=True)
class Replayed:
    """The alerts of the batches replayed, and how far they reach: an alert in the topic beyond
    them (a later batch's) is not the model's to judge; one within them must be the model's."""

    alerts: list[dict[str, Any]]
    through: float  # the last batch's timestamp
    high_seq: dict[str, int]
    # Each device's readings partition, and the timestamp of that partition's last batch replayed:
    # the partitions commit apart, and the log may have been read between two of one batch's.
    homes: dict[str, int] = field(default_factory=dict)
    partitions_through: dict[int, float] = field(default_factory=dict)

    def covers(self, alert: Mapping[str, Any]) -> bool:
        if alert["metric"] == "presence":
            home = self.homes.get(alert["device"])
            through = self.through if home is None else self.partitions_through.get(home, -math.inf)
            return bool(alert["ts"] <= through)
        return bool(alert["seq"] <= self.high_seq.get(alert["device"], -1))


def replay(records: Iterable[Record], batches: Sequence[Batch], rules: AlertRules) -> Replayed:
    """Every alert of `batches` from the raw topic's authentic records. The batches must be the
    app's batch log from its first record on, in its order."""
    ordered = sorted(batches, key=lambda b: b.id)
    if [b.id for b in ordered] != list(range(len(ordered))):
        raise ValueError("the batches must be every batch from 0: the batch log read from its first record")
    by_partition: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for partition, offset, value in records:
        by_partition[partition].append((offset, value))
    for rows in by_partition.values():
        rows.sort()
    model = AlertsModel(rules)
    starts: dict[int, int] = {}
    homes: dict[str, int] = {}
    through: dict[int, float] = {}
    found: list[dict[str, Any]] = []
    for batch in ordered:
        now = math.floor(batch.timestamp)  # Spark's unix_timestamp of the batch's time: whole seconds
        readings: list[Reading] = []
        for partition, end in sorted(batch.ends.items()):
            start = starts.get(partition, 0)
            values = [v for offset, v in by_partition.get(partition, []) if start <= offset < end]
            valid, _ = split_records(values, now=now, max_clock_skew_s=rules.max_clock_skew_s)
            homes.update((r.device, partition) for r in valid)
            readings += valid
            through[partition] = batch.timestamp
        judged = {device for device, home in homes.items() if home in batch.ends}
        found += model.batch(readings, batch.timestamp, judged)
        starts.update(batch.ends)
    last = ordered[-1].timestamp if ordered else 0.0
    return Replayed(found, last, dict(model.high_seq), homes, through)


def kind_of(alert: Mapping[str, Any]) -> str:
    """above, below, deviation, silent or back."""
    reason = str(alert["reason"])
    return "deviation" if "standard deviations" in reason else reason.split()[0].rstrip(":")


def key_of(alert: Mapping[str, Any]) -> AlertKey:
    if alert["metric"] == "presence":
        return alert["device"], alert["reason"].split(":")[0], alert["ts"]
    return alert["device"], alert["sensor"], alert["metric"], alert["seq"]


def _same(want: Mapping[str, Any], have: Mapping[str, Any]) -> bool:
    """Fields equal; the baseline's floats, and the numbers a deviation's reason prints, up to
    summation order (Spark sums a batch partition by partition)."""
    for name, expected in want.items():
        got = have.get(name)
        if name in ("baseline_mean", "baseline_stddev") and expected is not None and got is not None:
            if not math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-12):
                return False
        elif name == "reason" and "standard deviations" in str(expected):
            if not _close_numbers(_numbers(expected), _numbers(got)):
                return False
        elif expected != got:
            return False
    return True


def _numbers(reason: Any) -> tuple[float, float] | None:
    """The z and the mean a deviation's reason prints (Java's rounding and Python's may differ
    in the last digit)."""
    words = str(reason).split()
    try:
        return float(words[0]), float(words[-1])
    except (ValueError, IndexError):
        return None


def _close_numbers(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    if a is None or b is None:
        return False
    (z_a, mean_a), (z_b, mean_b) = a, b
    return math.isclose(z_a, z_b, abs_tol=0.11) and math.isclose(mean_a, mean_b, abs_tol=0.0011)


def compare_alerts(replayed: Replayed, alert_values: Iterable[bytes]) -> list[str]:
    """Every difference between the model's alerts and the alerts topic; empty when they agree.
    The topic may also hold alerts of batches after those replayed (the app went on after its
    offset log was read), each once."""
    expected = replayed.alerts
    got: dict[AlertKey, list[dict[str, Any]]] = defaultdict(list)
    for value in alert_values:
        doc = json.loads(value)
        doc.pop("schema", None)
        got[key_of(doc)].append(doc)
    problems = []
    for want in expected:
        key = key_of(want)
        have = got.get(key, [])
        if not have:
            problems.append(f"missing alert {key}: expected {want}")
        elif len(have) > 1:
            problems.append(f"alert {key} written {len(have)} times")
        elif not _same(want, have[0]):
            problems.append(f"alert {key}: got {have[0]}, expected {want}")
    twice = [key for key, n in Counter(key_of(a) for a in expected).items() if n > 1]
    problems += [f"the model raised alert {key} twice" for key in twice]
    for key in sorted(set(got) - {key_of(a) for a in expected}, key=repr):
        if replayed.covers(got[key][0]) or len(got[key]) > 1:
            problems.append(f"unexpected alert {key}: {got[key]}")
    return problems
