"""Windowed statistics of the readings: the core of sensor_aggregates, kept apart to be tested."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

AGGREGATE_SCHEMA_VERSION = 1


def deduplicated(readings: DataFrame, watermark: str) -> DataFrame:
    """One row per (device, seq): a batch the agent resent after a crash counts once.

    Duplicates are recognised while the first copy is within the watermark; a copy
    arriving later than that is late data and is dropped by the windows anyway.
    """
    return readings.withWatermark("event_time", watermark).dropDuplicatesWithinWatermark(["device", "seq"])


def window_stats(readings: DataFrame, window: str) -> DataFrame:
    """count, min, max, mean and population stddev per window x device x sensor x metric.

    With a watermark upstream, a window is emitted once, when the watermark passes its end.
    """
    grouped = readings.groupBy(F.window("event_time", window).alias("w"), "device", "sensor", "metric").agg(
        F.count(F.lit(1)).alias("count"),
        F.min("value").alias("min"),
        F.max("value").alias("max"),
        F.avg("value").alias("mean"),
        F.stddev_pop("value").alias("stddev"),
        F.max("unit").alias("unit"),
    )
    return grouped.select(
        "device", "sensor", "metric", "unit",
        F.unix_timestamp("w.start").alias("window_start"),
        F.unix_timestamp("w.end").alias("window_end"),
        "count", "min", "max", "mean", "stddev",
        F.to_date("w.start").alias("date"),
    )  # fmt: skip


def as_kafka_records(stats: DataFrame) -> DataFrame:
    """Keyed by device (one device's windows stay in order in one partition)."""
    body = F.struct(
        F.lit(AGGREGATE_SCHEMA_VERSION).alias("schema"),
        "device", "sensor", "metric", "unit", "window_start", "window_end",
        "count", "min", "max", "mean", "stddev",
    )  # fmt: skip
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
        stats.withColumn("batch", F.lit(batch_id)).coalesce(1).write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic").partitionBy("date", "batch").parquet(path)
    )  # fmt: skip
