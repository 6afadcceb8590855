"""Daily statistics from the windows sensor_aggregates wrote to Parquet."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def daily(windows: DataFrame) -> DataFrame:
    """Per date x device x sensor x metric: readings, min, max, mean and population stddev,
    pooled exactly from the windows' own count/mean/stddev."""
    n = F.sum("count")
    mean = F.sum(F.col("mean") * F.col("count")) / n
    square_mean = F.sum((F.col("stddev") ** 2 + F.col("mean") ** 2) * F.col("count")) / n
    return (
        windows.groupBy("date", "device", "sensor", "metric")
        .agg(
            n.alias("count"),
            F.min("min").alias("min"),
            F.max("max").alias("max"),
            mean.alias("mean"),
            F.sqrt(F.greatest(square_mean - mean * mean, F.lit(0.0))).alias("stddev"),
            F.count(F.lit(1)).alias("windows"),
            F.max("unit").alias("unit"),
        )
        .orderBy("date", "device", "sensor", "metric")
    )
