"""anomaly_alerts' fold of one readings partition (pikit_spark/partition_fold.py): the task is
given its partition's verdicts as they are (its readings, and a row for each dead letter), and
judges the readings against its devices' baselines,
seq marks, excursions and presence (anomalies.judge, presence.presence), all in its partition's
state. Its alerts go out in the partition's transaction.

A reading is judged against a baseline that only its task holds, so the readings cross into
Python: at the lab's 10,000 devices a batch holds about two readings of each device, and a summary
in Spark would be no smaller. The fold's cost divides over the executors with the partitions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from pyspark.sql import DataFrame, Row

from pikit_spark.anomalies import READING_COLUMNS, Rules, as_kafka_records, judge
from pikit_spark.partition_fold import Folder, PartitionBatch, Step, route
from pikit_spark.presence import presence
from pikit_spark.state import TableRow, Tables

# A partition's presence rows that the driver is told (PRESENCE_SCHEMA's: device, last_seen, silent).
Presence = tuple[str, float, bool]


@dataclass(frozen=True)
class AlertFolder(Folder):
    rules: Rules
    silent_after_s: float
    alerts_topic: str

    counted: ClassVar[Mapping[str, str]] = {"alerts": "alerts"}

    def clock(self, processed_at: float) -> float:
        """Presence is judged in processing time: the batch's own."""
        return processed_at

    def rows(self, verdicts: DataFrame, partitions: int, batch: PartitionBatch) -> DataFrame:
        """readings.parse's verdicts: READING_COLUMNS, then the `reason` of a dead letter, and the
        `partition`. The dead letters come too (sensor_aggregates writes them): a task that read
        records and is given no row takes its input as cut short (partition_fold.complete)."""
        return route(verdicts.select(*READING_COLUMNS, "reason", "partition"), partitions)

    def fold(self, rows: list[Row], state: Tables, batch: PartitionBatch, k: int, *, second: bool) -> Step:
        reason_at = len(READING_COLUMNS)
        judged = judge((row for row in rows if row[reason_at] is None), state, self.rules)
        silences, present = presence(judged.seen, batch.processed_at, state["presence"], self.silent_after_s)
        found = judged.alerts + silences
        # The driver's gauges of each device: what changed, or all of it while the driver has not
        # heard of the partition (its first batch).
        before = set(state["presence"]) if batch.heard(k) else set()
        told = tuple(_presence(row) for row in present if row not in before)
        return Step(
            {self.alerts_topic: as_kafka_records(found)},
            {**judged.state, "presence": present},
            {"alerts": len(found)},
            silent_from(present, self.silent_after_s),
            told,
        )


def silent_from(present: list[TableRow], silent_after_s: float) -> float:
    """The latest batch time at which a fold of no readings finds no device silent that was not
    already (infinite with none): a device is silent at last_seen + silent_after_s."""
    due = min((seen + silent_after_s for _, seen, silent in present if not silent), default=math.inf)
    return math.nextafter(due, -math.inf)


def _presence(row: TableRow) -> Presence:
    device, last_seen, silent = row
    return str(device), float(last_seen), bool(silent)
