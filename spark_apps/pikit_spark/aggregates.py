"""sensor_aggregates' outputs of the closed windows (device_windows.py): Kafka records, Parquet."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pikit_spark.sink import Record
from pikit_spark.state import TableRow, Tables

AGGREGATE_SCHEMA_VERSION = 1
CLOSED_SCHEMA = (
    "device string, sensor string, metric string, unit string, window_start long, window_end long, "
    "count long, min double, max double, mean double, stddev double, date date"
)
_COLUMNS = [part.split()[0] for part in CLOSED_SCHEMA.split(", ")]
_BODY = [c for c in _COLUMNS if c != "date"]
# Closed windows waiting for their Parquet copy, in the app's state (`date` follows from
# window_start), and the processing time of the last copy.
PARQUET_STATE_SCHEMAS = {
    "parquet_pending": ", ".join(p for p in CLOSED_SCHEMA.split(", ") if not p.startswith("date ")),
    "parquet_copied": "at double",
}
PARQUET_PENDING_MAX = 50_000  # windows; bounds the state file between copies


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


def as_latest_records(closed: list[dict[str, Any]]) -> list[Record]:
    """The newest of the batch's closed windows for each device x sensor x metric, keyed
    `device/sensor/metric` (no name holds a "/": pikit_contract.readings.NAME_PATTERN), for the
    compacted latest topic, where the last record of each key stays: one small topic answers
    "what does this device read now" without reading the history."""
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for window in closed:
        series = (window["device"], window["sensor"], window["metric"])
        if series not in newest or window["window_start"] > newest[series]["window_start"]:
            newest[series] = window
    keys = sorted(newest)
    bodies = as_kafka_records([newest[series] for series in keys])
    return [
        ("/".join(series).encode(), value, headers)
        for series, (_, value, headers) in zip(keys, bodies, strict=True)
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


@dataclass(frozen=True)
class ParquetCopy:
    """What a micro-batch copies to Parquet now (nothing when `due` is false), and the
    state's Parquet tables after it."""

    due: bool
    windows: list[dict[str, Any]]
    state: Tables


def parquet_copy(
    state: Tables, closed: list[dict[str, Any]], processed_at: float, every_s: float
) -> ParquetCopy:
    """Closed windows are copied to Parquet together, once `every_s` of processing time has
    passed since the last copy (or once PARQUET_PENDING_MAX wait): one Spark job a minute
    instead of one per micro-batch, which on a Pi costs a second or more whatever its size.
    Until then they wait in the state, versioned with the batch: a replayed batch reads the
    same pending windows and processing time, so it makes the same decision and rewrites the
    same directory. `every_s` 0 copies every batch (a catch-up run that then exits)."""
    waiting = [_closed_row(row) for row in state.get("parquet_pending", [])] + closed
    copied: list[TableRow] = state.get("parquet_copied", [])
    last = copied[0][0] if copied else None
    due = bool(waiting) and (
        every_s <= 0 or last is None or processed_at - last >= every_s or len(waiting) >= PARQUET_PENDING_MAX
    )
    if due:
        return ParquetCopy(True, waiting, {"parquet_pending": [], "parquet_copied": [(processed_at,)]})
    pending = [tuple(w[c] for c in _BODY) for w in waiting]
    return ParquetCopy(False, [], {"parquet_pending": pending, "parquet_copied": copied})


def _closed_row(row: TableRow) -> dict[str, Any]:
    window = dict(zip(_BODY, row, strict=True))
    window["date"] = datetime.fromtimestamp(window["window_start"], UTC).date()
    return window
