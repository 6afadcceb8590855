"""sensor_aggregates' outputs: Kafka records keyed by device, Parquet that a replay replaces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pikit_spark.aggregates import (
    PARQUET_STATE_SCHEMAS,
    as_kafka_records,
    as_latest_records,
    parquet_copy,
    write_parquet,
)
from pikit_spark.device_windows import STATE_SCHEMAS, Timing, advance
from pikit_spark.readings import parse
from pikit_spark.state import Tables
from pyspark.sql import SparkSession

from tests.unit.spark.records import T0, batch, reading

KAFKA_SCHEMA = "key binary, value binary, topic string, partition int, offset long"


def _closed(spark: SparkSession, readings: list[dict[str, float]]) -> list[dict[str, Any]]:
    """The windows these readings of edge-9 close, the device's clock then far past them."""
    closer = reading(99, T0 + 600, value=0.0)
    rows = [(b"k", batch("edge-9", [*readings, closer]), "t", 0, 0)]
    parsed = parse(spark.createDataFrame(rows, KAFKA_SCHEMA), max_clock_skew_s=10**9)
    return advance(parsed.readings, T0 + 600, {name: [] for name in STATE_SCHEMAS}, Timing()).closed


def test_a_replayed_batch_replaces_its_own_parquet_files(spark: SparkSession, tmp_path: Path) -> None:
    stats = _closed(spark, [reading(1, T0, value=2.0), reading(2, T0 + 61, value=4.0)])
    out = str(tmp_path / "out")
    write_parquet(spark, stats, out, 7)
    write_parquet(spark, stats, out, 8)
    write_parquet(spark, stats, out, 7)  # the driver died after writing batch 7; it runs again
    got = spark.read.parquet(out).groupBy("batch").count().orderBy("batch").collect()
    assert [(r["batch"], r["count"]) for r in got] == [(7, 2), (8, 2)]


def test_aggregate_records_are_keyed_by_device(spark: SparkSession) -> None:
    stats = _closed(spark, [reading(1, T0, value=2.0), reading(2, T0 + 1, value=4.0)])
    ((key, value, headers),) = as_kafka_records(stats)
    assert (key, headers) == (b"edge-9", [])
    body = json.loads(value)
    assert body == {
        "schema": 1,
        "device": "edge-9",
        "sensor": "sim",
        "metric": "temperature",
        "unit": "C",
        "window_start": int(T0),
        "window_end": int(T0) + 60,
        "count": 2,
        "min": 2.0,
        "max": 4.0,
        "mean": 3.0,
        "stddev": 1.0,
    }


def test_the_latest_topic_gets_the_newest_window_of_each_series_keyed_by_it(spark: SparkSession) -> None:
    stats = _closed(spark, [reading(1, T0, value=2.0), reading(2, T0 + 61, value=4.0)])
    other = {**stats[0], "device": "edge-1", "window_start": stats[0]["window_start"] - 60}
    latest = as_latest_records([stats[1], other, stats[0]])  # any order: the newest window wins
    assert [key for key, _, _ in latest] == [b"edge-1/sim/temperature", b"edge-9/sim/temperature"]
    assert latest[1][1] == as_kafka_records([stats[1]])[0][1], "the same body as the aggregate's"
    assert json.loads(latest[1][1])["window_start"] == int(T0) + 60
    assert as_latest_records([]) == []


def test_closed_windows_wait_in_the_state_and_are_copied_to_parquet_once_a_minute(
    spark: SparkSession,
) -> None:
    first = _closed(spark, [reading(1, T0, value=2.0)])
    second = _closed(spark, [reading(1, T0 + 60, value=3.0)])
    state: Tables = {name: [] for name in PARQUET_STATE_SCHEMAS}
    copy = parquet_copy(state, first, T0 + 600, every_s=60)
    assert copy.due and copy.windows == first, "the first windows start the clock"
    state = copy.state
    waiting = parquet_copy(state, second, T0 + 630, every_s=60)
    assert not waiting.due and not waiting.windows
    replayed = parquet_copy(state, second, T0 + 630, every_s=60)
    assert replayed == waiting, "a replayed batch decides alike from the same state version"
    # The state goes through JSON between batches (pikit_spark/state.py).
    stored = {
        name: [tuple(row) for row in json.loads(json.dumps(rows))] for name, rows in waiting.state.items()
    }
    nothing_new = parquet_copy(stored, [], T0 + 650, every_s=60)
    assert not nothing_new.due and nothing_new.state == waiting.state
    due = parquet_copy(stored, first, T0 + 660, every_s=60)
    assert due.due and due.windows == second + first, "what waited comes back as it was closed"
    assert due.state == {"parquet_pending": [], "parquet_copied": [(T0 + 660,)]}
    assert parquet_copy(stored, second, T0 + 640, every_s=0).due, "0: every micro-batch"
