"""Daily statistics from the windows sensor_aggregates wrote to the aggregates topic, and what
goes to the compacted daily topic."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pikit_spark.sink import Record

DAILY_SCHEMA_VERSION = 1
# An aggregate record's body (pikit_spark/aggregates.py, as_kafka_records).
WINDOW_SCHEMA = (
    "schema int, device string, sensor string, metric string, unit string, window_start long, "
    "window_end long, count long, min double, max double, mean double, stddev double"
)
DAILY_COLUMNS = [
    "date",
    "device",
    "sensor",
    "metric",
    "count",
    "min",
    "max",
    "mean",
    "stddev",
    "windows",
    "unit",
]


def windows_of(records: DataFrame) -> DataFrame:
    """The aggregates topic's records (Spark's Kafka source) as windows, each with its UTC date."""
    body = F.from_json(F.col("value").cast("string"), WINDOW_SCHEMA)
    windows = records.select(body.alias("w")).select("w.*").drop("schema")
    return windows.withColumn("date", F.to_date(F.from_unixtime("window_start")))


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


def dates_to_roll_up(
    present: Iterable[dt.date], today: dt.date, days: int, trimmed: bool, asked: Iterable[str] = ()
) -> tuple[list[dt.date], list[dt.date]]:
    """(the dates to roll up, the dates passed over). The last `days` dates (today included), or
    the `asked` ones; never the topic's earliest date when its retention has deleted records: that
    date's first windows may be gone, and a partial day would replace a whole one."""
    dates = sorted(set(present))
    wanted = {dt.date.fromisoformat(d) for d in asked}
    oldest = today - dt.timedelta(days=days - 1)
    chosen = [d for d in dates if (d in wanted if wanted else d >= oldest)]
    partial = [dates[0]] if trimmed and dates and dates[0] in chosen else []
    return [d for d in chosen if d not in partial], partial


def as_daily_records(rows: Iterable[dict[str, Any]]) -> list[Record]:
    """Keyed `device/sensor/metric/date`: the compacted topic keeps each day's newest roll-up."""
    out: list[Record] = []
    for row in rows:
        body = {"schema": DAILY_SCHEMA_VERSION, **{c: row[c] for c in DAILY_COLUMNS}}
        body["date"] = row["date"].isoformat()
        key = f"{row['device']}/{row['sensor']}/{row['metric']}/{body['date']}"
        out.append((key.encode(), json.dumps(body, separators=(",", ":")).encode(), []))
    return out
