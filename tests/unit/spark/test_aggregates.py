"""sensor_aggregates' outputs: Kafka records keyed by device, and the latest topic's."""

from __future__ import annotations

import json
from typing import Any

from pikit_spark.aggregates import as_kafka_records, as_latest_records
from pikit_spark.device_windows import STATE_SCHEMAS, Timing
from pikit_spark.readings import parse
from pikit_testkit.driver_fold import advance
from pyspark.sql import SparkSession

from tests.unit.spark.records import T0, batch, reading

KAFKA_SCHEMA = "key binary, value binary, topic string, partition int, offset long"


def _closed(spark: SparkSession, readings: list[dict[str, float]]) -> list[dict[str, Any]]:
    """The windows these readings of edge-9 close, the device's clock then far past them."""
    closer = reading(99, T0 + 600, value=0.0)
    rows = [(b"k", batch("edge-9", [*readings, closer]), "t", 0, 0)]
    parsed = parse(spark.createDataFrame(rows, KAFKA_SCHEMA), max_clock_skew_s=10**9)
    return advance(parsed.readings, T0 + 600, {name: [] for name in STATE_SCHEMAS}, Timing()).closed


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
