"""Per-device event time: a device that drains its spool after an outage gets every window
exact while the others' windows close on time; resends are dropped by seq; what comes
after a window closed is late, with its reason."""

from __future__ import annotations

import json
import random
import statistics
from collections import Counter
from typing import Any

from pikit_contract.readings import Reading, encode_batch
from pikit_spark.device_windows import (
    LATE_CLOSED,
    LATE_HORIZON,
    STATE_SCHEMAS,
    Timing,
    summarize,
)
from pikit_spark.readings import parse, too_far_ahead
from pikit_spark.seqs import repeating
from pikit_spark.state import Tables
from pikit_testkit.driver_fold import advance
from pikit_testkit.pipeline_model import Timing as ModelTiming
from pikit_testkit.pipeline_model import compare, outcome
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from tests.unit.spark.conftest import JobCounter
from tests.unit.spark.records import T0, batch, reading

READING = "device string, seq long, sensor string, metric string, value double, unit string, ts double"
TIMING = Timing(window_s=60, slack_s=10, horizon_s=3600)


class Stream:
    """Feeds batches to `advance` as the app does, keeping the state between them."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.state: Tables = {name: [] for name in STATE_SCHEMAS}
        self.closed: list[dict[str, Any]] = []
        self.late: list[dict[str, Any]] = []
        self.sent: list[tuple[Any, ...]] = []

    def batch(self, rows: list[tuple[Any, ...]], processed_at: float) -> list[dict[str, Any]]:
        self.sent += rows
        step = advance(self.spark.createDataFrame(rows, READING), processed_at, self.state, TIMING)
        self.closed += step.closed
        self.late += step.late
        self.state = step.state
        return step.closed


def readings(device: str, seqs: range, start: float, value: float = 1.0) -> list[tuple[Any, ...]]:
    """One reading per second from `start`, values value, value+1, ..."""
    return [(device, s, "sim", "t", value + i, "C", start + i) for i, s in enumerate(seqs)]


def windows_of(closed: list[dict[str, Any]], device: str) -> dict[int, tuple[int, float, float]]:
    return {
        int(w["window_start"] - T0): (w["count"], w["mean"], w["stddev"])
        for w in closed
        if w["device"] == device
    }


def test_a_device_draining_its_spool_gets_every_window_while_others_close_on_time(
    spark: SparkSession,
) -> None:
    stream = Stream(spark)
    # Both send minute 0; then "b" goes offline for minutes 1-4 while "a" sends on.
    stream.batch(readings("a", range(60), T0) + readings("b", range(60), T0), T0 + 60)
    for minute in range(1, 5):
        closed = stream.batch(
            readings("a", range(60 * minute, 60 * minute + 60), T0 + 60 * minute), T0 + 60 * minute + 60
        )
        assert {(w["device"], int(w["window_start"] - T0)) for w in closed} == {("a", 60 * (minute - 1))}, (
            "a's windows close on a's clock, one a minute"
        )
    assert "b" not in {w["device"] for w in stream.closed}, "b's open window waits for b"
    # b comes back and drains minutes 1-4 of its spool, then sends minute 5.
    stream.batch(readings("b", range(60, 300), T0 + 60) + readings("b", range(300, 360), T0 + 300), T0 + 400)
    b = windows_of(stream.closed, "b")
    assert sorted(b) == [0, 60, 120, 180, 240], "every window of the outage, exact"
    for start, (count, mean, stddev) in b.items():
        values = [r[4] for r in stream.sent if r[0] == "b" and T0 + start <= r[6] < T0 + start + 60]
        assert count == len(values) == 60
        assert abs(mean - statistics.fmean(values)) < 1e-9
        assert abs(stddev - statistics.pstdev(values)) < 1e-9
    assert not stream.late


def test_resends_are_dropped_by_seq_and_later_readings_of_closed_windows_are_late(
    spark: SparkSession,
) -> None:
    stream = Stream(spark)
    stream.batch(readings("a", range(0, 90), T0), T0 + 90)  # closes minute 0 (90 - 10 slack >= 60)
    # An agent crash resends seq 50-89; a reading for the closed minute 0 arrives after.
    stream.batch([*readings("a", range(50, 90), T0 + 50), ("a", 90, "sim", "t", 99.0, "C", T0 + 5)], T0 + 95)
    (minute0,) = [w for w in stream.closed if w["window_start"] == T0]
    assert minute0["count"] == 60, "the resend counted once"
    assert [(r["seq"], r["reason"]) for r in stream.late] == [(90, LATE_CLOSED)]
    stream.batch(readings("a", range(91, 200), T0 + 91), T0 + 200)
    (minute1,) = [w for w in stream.closed if w["window_start"] == T0 + 60]
    assert minute1["count"] == len(range(60, 90)) + len(range(91, 120)), "seq 60-89 once, then 91-119"


def test_a_silent_device_is_closed_after_the_horizon_and_what_comes_later_is_late(
    spark: SparkSession,
) -> None:
    stream = Stream(spark)
    stream.batch(readings("quiet", range(30), T0), T0 + 30)
    stream.batch(readings("busy", range(30), T0 + 1000), T0 + 1000)
    assert not stream.closed, "within the horizon the quiet device's window waits"
    closed = stream.batch(readings("busy", range(30, 40), T0 + 3700), T0 + 3700)
    assert ("quiet", 0) in {(w["device"], int(w["window_start"] - T0)) for w in closed}
    stream.batch([("quiet", 30, "sim", "t", 5.0, "C", T0 + 31)], T0 + 3800)
    assert [(r["device"], r["reason"]) for r in stream.late] == [("quiet", LATE_CLOSED)]
    stream.batch([("ghost", 0, "sim", "t", 5.0, "C", T0 + 10)], T0 + 3900)
    assert stream.late[-1]["reason"] == LATE_HORIZON, "a first reading older than the horizon"


def test_the_pipeline_model_agrees_with_advance_on_a_messy_stream(spark: SparkSession) -> None:
    """pikit_testkit/pipeline_model.py judges the lab's output: it must replay the same rules."""
    rng = random.Random(7)
    stream = Stream(spark)
    model_timing = ModelTiming(TIMING.window_s, TIMING.slack_s)
    records: list[bytes] = []
    next_seq = {"a": 0, "b": 0, "c": 0}
    clock = {"a": T0, "b": T0, "c": T0}
    for batch_no in range(8):
        rows: list[tuple[Any, ...]] = []
        for device in next_seq:
            if device == "c" and 2 <= batch_no <= 5:
                continue  # c is offline; it drains everything at batch 6
            span = 180 if device == "c" and batch_no == 6 else 40
            chunk = [
                (
                    device,
                    next_seq[device] + i,
                    "sim",
                    rng.choice(["t", "h"]),
                    rng.uniform(-5, 35),
                    "C",
                    clock[device] + i * 1.5,
                )
                for i in range(int(span / 1.5))
            ]
            if batch_no >= 2 and rng.random() < 0.7:  # a late reading for a window closed earlier
                late = (device, next_seq[device], "sim", "t", 1.0, "C", T0 + rng.uniform(0, 30))
                chunk = [late] + [(r[0], r[1] + 1, *r[2:]) for r in chunk]
            if rows and rng.random() < 0.5:  # a resend of what this batch already holds
                chunk += rows[-3:] if rows[-1][0] == device else []
            if stream.sent and rng.random() < 0.5:  # a resend after an agent crash
                chunk += [r for r in stream.sent if r[0] == device][-5:]
            next_seq[device] = max(r[1] for r in chunk) + 1
            clock[device] += span
            rows += chunk
        stream.batch(rows, max(clock.values()))
        for row in rows:
            reading = Reading(row[0], row[1], row[2], row[3], row[4], row[5], row[6])
            records.append(encode_batch(row[0], [reading]))
    model = outcome(records, now=max(clock.values()), timing=model_timing)
    assert model.duplicates > 0 and model.late, "the stream exercised resends and late readings"
    assert not compare(model.windows, [json.dumps(w, default=str).encode() for w in stream.closed])
    assert sorted((r.device, r.seq) for r in model.late) == sorted(
        (r["device"], r["seq"]) for r in stream.late
    )


KAFKA_SCHEMA = "key binary, value binary, topic string, partition int, offset long"


def test_a_batch_of_known_devices_is_one_read_and_only_a_resend_or_a_late_reading_reads_again(
    spark: SparkSession, spark_jobs: JobCounter
) -> None:
    """The devices' marks are applied on the driver: no broadcast job per batch. A batch
    whose rows the marks would change is read again for those devices alone, exactly, with
    their marks in the plan: one more job, not two."""
    stream = Stream(spark)
    stream.batch(readings("a", range(90), T0) + readings("b", range(90), T0), T0 + 90)
    one_read = spark_jobs(
        lambda: summarize(
            spark.createDataFrame(readings("a", range(5), T0), READING),
            {},
            horizon_end=0,
            timing=TIMING,
        ).collect()
    )
    steady = spark_jobs(lambda: stream.batch(readings("a", range(90, 150), T0 + 90), T0 + 150))
    assert steady == one_read, "the batch's one read, and nothing else"
    resent = spark_jobs(lambda: stream.batch(readings("a", range(140, 200), T0 + 140), T0 + 200))
    late = spark_jobs(lambda: stream.batch([("b", 90, "sim", "t", 7.0, "C", T0 + 5)], T0 + 210))
    assert resent == late == 2 * one_read, "one more read of those devices, and no broadcast job"
    counts = {(w["device"], int(w["window_start"] - T0)): w["count"] for w in stream.closed}
    assert counts[("a", 120)] == 60, "seq 140-149 once"
    assert [(r["device"], r["seq"], r["reason"]) for r in stream.late] == [("b", 90, LATE_CLOSED)]


def test_the_summary_grows_with_windows_and_devices_not_with_readings(spark: SparkSession) -> None:
    """One device, 6,000 readings over 100 minutes: the batch folds into a row per window
    and per block of 64 seqs; nothing per reading is kept."""
    rows = readings("a", range(6000), T0)
    summary = summarize(spark.createDataFrame(rows, READING), {}, horizon_end=0, timing=TIMING)
    kinds = Counter(r["kind"] for r in summary.collect())
    assert kinds == {"window": 100, None: len(range(0, 6000, 64))}


def test_a_seq_repeated_within_a_batch_counts_once_whatever_the_copy_holds(spark: SparkSession) -> None:
    """A resend within one batch is found by its seq block; a copy that claims another window
    or metric is the same reading all the same (first-come, as the dedup by seq always was)."""
    stream = Stream(spark)
    forged = ("a", 10, "sim", "other", 500.0, "C", T0 + 70)
    stream.batch([*readings("a", range(60), T0), forged, *readings("a", range(60, 180), T0 + 60)], T0 + 200)
    counts = {(w["metric"], int(w["window_start"] - T0)): w["count"] for w in stream.closed}
    assert sum(counts.values()) == 120, f"minutes 0 and 1 closed, seq 10 once: {counts}"
    assert counts.get(("t", 60)) == 60


def test_the_batch_gives_the_dead_letters_of_its_one_parse(spark: SparkSession) -> None:
    closer = reading(99, T0 + 600, value=0.0)
    good = batch("edge-9", [reading(1, T0, value=2.0), reading(2, T0 + 1, value=4.0), closer])
    bad_reading = batch("edge-9", [reading(3, T0 + 2), {**reading(4, T0 + 3), "seq": -1}])
    records = [(b"k", value, "t", 0, offset) for offset, value in enumerate([good, b"not json", bad_reading])]
    parsed = parse(spark.createDataFrame(records, KAFKA_SCHEMA), max_clock_skew_s=10**9)
    step = advance(parsed.verdicts, T0 + 600, {name: [] for name in STATE_SCHEMAS}, TIMING)

    def letters(rows: list[Any]) -> list[tuple[Any, ...]]:
        return sorted((r["reason"], r["offset"], r["index"], bytes(r["value"])) for r in rows)

    assert letters(step.dead) == letters(parsed.dead_letters.collect())
    assert [r["offset"] for r in step.dead] != [], "the malformed record and reading are there"
    (window,) = step.closed
    assert window["count"] == 3, "seq 1, 2 and the good reading (seq 3) beside the bad one"
    assert (window["min"], window["max"]) == (2.0, 20.0)


def test_a_window_whose_unit_changes_is_one_window_pooled_exactly(spark: SparkSession) -> None:
    stream = Stream(spark)
    celsius = readings("a", range(30), T0, value=1.0)
    kelvin = [(*r[:5], "K", r[6]) for r in readings("a", range(30, 60), T0 + 30, value=50.0)]
    stream.batch([*celsius, *kelvin, *readings("a", range(60, 80), T0 + 60)], T0 + 90)
    (window,) = [w for w in stream.closed if w["window_start"] == T0]
    values = [r[4] for r in celsius + kelvin]
    assert (window["count"], window["unit"]) == (60, "K")
    assert abs(window["mean"] - statistics.fmean(values)) < 1e-9
    assert abs(window["stddev"] - statistics.pstdev(values)) < 1e-9


def test_a_new_batch_time_compiles_no_new_code(spark: SparkSession) -> None:
    """Spark caches each compiled stage by its Java source: the batch's time and the late horizon
    must not be written into it, or every micro-batch pays a compile (pikit_spark/batch_values.py)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source  # type: ignore[union-attr]
    compiled = metrics.CodegenMetrics.METRIC_COMPILATION_TIME()
    empty: Tables = {name: [] for name in STATE_SCHEMAS}

    def compiles(processed_at: float, seq: int) -> int:
        record = batch("edge-9", [reading(seq, processed_at - 30), {**reading(seq + 1, processed_at + 900)}])
        frame = spark.createDataFrame([(b"k", record, "t", 0, seq)], KAFKA_SCHEMA)
        before = compiled.getCount()
        at = F.lit(processed_at).cast("timestamp")
        verdicts = parse(frame.withColumn("processed_at", at), 300).verdicts
        step = advance(verdicts, processed_at, empty, TIMING)
        assert [r["reason"] for r in step.dead] == [too_far_ahead(300)], "the batch time is still used"
        return int(compiled.getCount() - before)

    compiles(T0, 1)
    # 70 s apart: a new batch time and a new late horizon each time.
    assert [compiles(T0 + 70 * i, 10 * i) for i in range(1, 4)] == [0, 0, 0]


def test_a_batch_builds_its_summary_in_few_jvm_calls(spark: SparkSession, jvm_calls: JobCounter) -> None:
    """The summary's columns depend on the batch only through the late horizon, which moves once
    a window: a micro-batch within the same horizon builds none of them again."""
    empty: Tables = {name: [] for name in STATE_SCHEMAS}
    frames = [spark.createDataFrame(readings("a", range(i, i + 10), T0 + i), READING) for i in (0, 10)]
    advance(frames[0], T0 + 20, empty, TIMING)
    steady = jvm_calls(lambda: advance(frames[1], T0 + 30, empty, TIMING))
    assert steady < 200, steady  # 163 now; 496 when every batch built them


def test_a_by_partition_summary_tells_a_seq_twice_from_its_window_rows() -> None:
    """seqs.repeating sums a device's block over its window rows: seqs 62 and 63 in two metrics'
    rows (63 is a long's sign bit) are two seqs; 63 sent twice is a repeat."""

    def row(device: str | None, block: int | None, n: int, bits: int) -> Row:
        return Row(device=device, seq_block=block, n=n, seq_bits=bits)

    top = -(1 << 63)  # bit 63, as Spark's long holds it
    once = [row("a", 0, 1, 1 << 62), row("a", 0, 1, top), row(None, None, 1, 0)]
    assert repeating(once) == set()
    assert repeating([*once, row("a", 0, 1, top)]) == {"a"}
    assert repeating([row("a", 0, 1, 1), row("a", 1, 1, 1), row("b", 0, 2, 1)]) == {"b"}
