"""sensor_aggregates' outputs of the closed windows (device_windows.py): Kafka records, Parquet."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pikit_spark.sink import Record

AGGREGATE_SCHEMA_VERSION = 1
CLOSED_SCHEMA = (
    "device string, sensor string, metric string, unit string, window_start long, window_end long, "
    "count long, min double, max double, mean double, stddev double, date date"
)
_COLUMNS = [part.split()[0] for part in CLOSED_SCHEMA.split(", ")]
_BODY = [c for c in _COLUMNS if c != "date"]


def as_kafka_records(closed: list[dict[str, Any]]) -> list[Record]:
    """Keyed by device (one device's windows stay in order in one partition)."""
    return [
        (
            window["device"].encode(),
            json.dumps(
                {"schema": AGGREGATE_SCHEMA_VERSION, **{c: window[c] for c in _BODY}}, separators=(",", ":")
            ).encode(),
            [],
        )
        for window in closed
    ]


def write_parquet(spark: SparkSession, closed: list[dict[str, Any]], path: str, batch_id: int) -> None:
    """Append one micro-batch's windows under <path>/date=…/batch=<id>/.

    A batch replayed after a crash replaces its own directory (dynamic partition
    overwrite) instead of adding a second copy, so the Parquet output is exactly-once
    like the Kafka one.
    """
    (
        # Rows that fold() made to the schema: not checked one by one again.
        spark.createDataFrame(
            [tuple(w[c] for c in _COLUMNS) for w in closed], CLOSED_SCHEMA, verifySchema=False
        )
        .withColumn("batch", F.lit(batch_id))
        .coalesce(1)
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("date", "batch")
        .parquet(path)
    )
