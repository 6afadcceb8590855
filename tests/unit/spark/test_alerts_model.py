"""The plain-Python model of anomaly_alerts (pikit_testkit/alerts_model.py) against the app's own
fold of each readings partition (pikit_spark/alert_fold.py), batch by batch, on a messy seeded
stream, the partitions committed and logged apart as the app's tasks do: the model the end-to-end
suite compares the alerts topic with must say what the app says."""

from __future__ import annotations

import json
import random

import pytest
from kafka import TopicPartition
from pikit_contract.readings import Reading
from pikit_spark.alert_fold import AlertFolder
from pikit_spark.anomalies import STATE_SCHEMAS, Rules, Threshold
from pikit_spark.batches import CommittedBatch
from pikit_spark.partition_fold import Folded, IdlePartitions, PartitionBatch, Writer
from pikit_spark.partition_sink import Slice
from pikit_spark.state import Tables
from pikit_testkit.alerts_model import (
    AlertRules,
    Batch,
    compare_alerts,
    kind_of,
    replay,
)
from pyspark.sql import Row

from tests.unit.spark.records import T0

SILENT_AFTER_S = 30.0
# edge-3 alone in partition 1: its task has nothing to read while the device is silent.
HOMES = {"edge-1": 0, "edge-2": 0, "edge-3": 1}


def _stream(seed: int, batches: int) -> list[list[Reading]]:
    """Three devices, a batch every 10 s: normal values with spikes and threshold breaks, some
    excursions spanning batches (edge-1's over batches 20-21, back within bounds and out again
    in batch 22), resends within a batch and of an earlier batch, and edge-3 silent from batch
    8 to 13."""
    rng = random.Random(seed)
    seqs = dict.fromkeys(("edge-1", "edge-2", "edge-3"), 0)
    sent: list[Reading] = []
    out: list[list[Reading]] = []
    for b in range(batches):
        now = T0 + 10 * b
        rows: list[Reading] = []
        for device in seqs:
            if device == "edge-3" and 8 <= b <= 13:
                continue
            for _ in range(rng.randint(3, 8)):
                value = rng.gauss(20.0, 1.0)
                if rng.random() < 0.06:
                    value += rng.choice((-1, 1)) * rng.uniform(6, 15)  # a spike, maybe past a limit
                if b in (20, 21) and device == "edge-1":
                    value = 40.0  # an excursion over two batches
                if b == 22 and device == "edge-1":
                    # back within bounds, then out again: it ends, and the next one starts
                    value = 40.0 if rows and rows[-1].device == device else 20.0
                rows.append(Reading(device, seqs[device], "simulated", "temperature", value, "C", now))
                seqs[device] += 1
        if rows and rng.random() < 0.3:
            rows.append(rng.choice(rows))  # a resend within the batch
        if sent and rng.random() < 0.2:
            rows.append(rng.choice(sent))  # a resend of an earlier batch's reading
        sent += rows
        out.append(rows)
    return out


def _record(r: Reading) -> bytes:
    reading = {"seq": r.seq, "sensor": r.sensor, "metric": r.metric, "value": r.value}
    reading |= {"unit": r.unit, "ts": r.ts}
    return json.dumps({"schema": 1, "device": r.device, "readings": [reading]}).encode()


def _task_row(r: Reading) -> Row:
    """A reading as a fold task is given it (AlertFolder.rows' columns)."""
    return Row(
        device=r.device,
        sensor=r.sensor,
        metric=r.metric,
        seq=r.seq,
        value=r.value,
        unit=r.unit,
        ts=r.ts,
        reason=None,
        partition=HOMES[r.device],
    )


def test_the_model_raises_what_the_app_raises_batch_by_batch() -> None:
    rules = Rules((Threshold("simulated", "temperature", 5.0, 30.0),), k=3.0, min_samples=10, baseline_n=50)
    model_rules = AlertRules.from_strings(
        ["simulated.temperature=5:30"], k=3.0, min_samples=10, baseline_n=50, silent_after_s=SILENT_AFTER_S
    )
    folder = AlertFolder(rules, SILENT_AFTER_S, "alerts")
    writer = Writer("anomaly_alerts", ("alerts",), "state", STATE_SCHEMAS, {})
    idle = IdlePartitions()
    states: dict[int, Tables] = {k: {name: [] for name in STATE_SCHEMAS} for k in (0, 1)}
    offsets = dict.fromkeys((0, 1), 0)
    records: list[tuple[int, int, bytes]] = []
    log: list[bytes] = []
    app_alerts: list[bytes] = []
    idle_tasks = 0
    gauges: dict[str, tuple[float, bool]] = {}
    stream = _stream(7, 30)
    for b, rows in enumerate(stream):
        at = T0 + 10 * b + 0.5
        starts = dict(offsets)
        for r in rows:
            records.append((HOMES[r.device], offsets[HOMES[r.device]], _record(r)))
            offsets[HOMES[r.device]] += 1
        slices = {k: Slice(TopicPartition("readings", k), starts[k], offsets[k]) for k in (0, 1)}
        batch = PartitionBatch(b, at, slices, writer, folder)
        needed = idle.needed(batch)
        idle_tasks += 2 - len(needed)
        batch = PartitionBatch(b, at, slices, writer, folder, unheard=idle.unheard(needed))
        for k in needed:
            given = [_task_row(r) for r in rows if HOMES[r.device] == k]
            step = folder.fold(given, states[k], batch, k, second=False)
            states[k] = step.state
            written = [value for _, value, _ in step.outputs["alerts"] if value is not None]
            app_alerts += written
            if written or starts[k] != offsets[k]:  # partition_fold's batch log rule
                _, logged, _ = CommittedBatch("anomaly_alerts", b, at, {k: offsets[k]}, "pi-4").record()
                log.append(logged or b"")
            idle.learn([Folded(k, len(written), idle_through=step.idle_through)])
            gauges.update((device, (seen, silent)) for device, seen, silent in step.told)
    assert idle_tasks > 0, "edge-3's partition ran no task while it had nothing to read or raise"
    expected = replay(records, [Batch.logged(n, value) for n, value in enumerate(log)], model_rules)
    # Batch 22 began with edge-1's excursion under way; it came back within bounds and went out again.
    batch_22 = {r.seq for r in stream[22] if r.device == "edge-1" and r.value == 40.0}
    assert [a["seq"] for a in map(json.loads, app_alerts) if a["seq"] in batch_22 and a["device"] == "edge-1"]
    kinds = {kind_of(json.loads(value)) for value in app_alerts}
    # The stream raised every kind of alert: threshold, deviation, silent and back.
    assert {"above", "deviation", "silent", "back"} <= kinds, kinds
    replayed = expected
    assert compare_alerts(replayed, app_alerts) == []
    # What the tasks told the driver of each device's presence adds up to the partitions' state.
    assert gauges == {row[0]: row[1:] for k in (0, 1) for row in states[k]["presence"]}
    # And the comparison can fail: one alert missing, one changed.
    changed = json.loads(app_alerts[-1]) | {"value": -1.0}
    assert compare_alerts(replayed, app_alerts[:-1])
    assert compare_alerts(replayed, [*app_alerts[:-1], json.dumps(changed).encode()])
    assert compare_alerts(replayed, [*app_alerts, app_alerts[0]])
    # An alert the model does not raise is wrong within the batches replayed, and a later
    # batch's beyond them.
    stray = json.loads(app_alerts[0]) | {"seq": 0, "reason": "above 30"}
    assert compare_alerts(replayed, [*app_alerts, json.dumps(stray).encode()])
    later = stray | {"seq": 10**6}
    assert compare_alerts(replayed, [*app_alerts, json.dumps(later).encode()]) == []


def test_the_batch_log_splits_the_raw_topic_into_the_apps_batches() -> None:
    """The app's batch log record of a batch gives each partition's end; the batch starts where
    the previous one ended, whichever driver ran it."""
    _, logged, _ = CommittedBatch("anomaly_alerts", 7, 1795000010.5, {0: 2, 1: 1}, "pi-4").record()
    assert logged is not None
    first = Batch.logged(0, logged)
    assert (first.timestamp, first.ends) == (1795000010.5, {0: 2, 1: 1})
    second = Batch(1, 1795000020.5, {0: 3, 1: 1})

    def record(device: str, seq: int, value: float) -> bytes:
        reading = {
            "seq": seq,
            "sensor": "simulated",
            "metric": "temperature",
            "value": value,
            "unit": "C",
            "ts": T0,
        }
        return json.dumps({"schema": 1, "device": device, "readings": [reading]}).encode()

    records = [
        (0, 0, record("edge-1", 0, 20.0)),
        (0, 1, record("edge-1", 1, 31.0)),
        (1, 0, record("edge-2", 0, 4.0)),
        (0, 2, record("edge-1", 2, 33.0)),
    ]
    rules = AlertRules.from_strings(["simulated.temperature=5:30"], silent_after_s=SILENT_AFTER_S)
    found = replay(records, [second, first], rules).alerts
    # Batch 0: edge-1 out at seq 1, edge-2 below; batch 1: edge-1 still out (no new alert).
    assert [(a["device"], a["seq"], a["reason"]) for a in found] == [
        ("edge-1", 1, "above 30"),
        ("edge-2", 0, "below 5"),
    ]
    with pytest.raises(ValueError, match="every batch from 0"):
        replay(records, [second], rules)
