"""sensor_aggregates' outputs of the closed windows (device_windows.py): Kafka records, Parquet."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

AGGREGATE_SCHEMA_VERSION = 1


def as_kafka_records(stats: DataFrame) -> DataFrame:
    """Keyed by device (one device's windows stay in order in one partition)."""
    body = F.struct(
        F.lit(AGGREGATE_SCHEMA_VERSION).alias("schema"),
        "device",
        "sensor",
        "metric",
        "unit",
        "window_start",
        "window_end",
        "count",
        "min",
        "max",
        "mean",
        "stddev",
    )
    return stats.select(
        F.col("device").cast("binary").alias("key"), F.to_json(body).cast("binary").alias("value")
    )


def write_parquet(stats: DataFrame, path: str, batch_id: int) -> None:
    """Append one micro-batch's windows under <path>/date=…/batch=<id>/.

    A batch replayed after a crash replaces its own directory (dynamic partition
    overwrite) instead of adding a second copy, so the Parquet output is exactly-once
    like the Kafka one.
    """
    (
        stats.withColumn("batch", F.lit(batch_id))
        .coalesce(1)
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("date", "batch")
        .parquet(path)
    )
