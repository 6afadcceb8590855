"""Grouping sets by explode: the groups Spark's groupingSets makes, without its shuffle when a
batch is read in one task."""

from __future__ import annotations

import json
from pathlib import Path

from pikit_spark.common import ONE_TASK_RECORDS, one_task_if_small
from pikit_spark.grouping import SET, grouped_by, grouping_sets
from pikit_spark.sink import batch_records
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ROWS = [
    ("a", "x", 1, 1.0),
    ("a", "y", 1, 2.0),
    ("a", "x", 2, 4.0),
    ("b", None, 3, 8.0),
    (None, "x", None, 16.0),
]


def _frame(spark: SparkSession) -> DataFrame:
    """ROWS over as many partitions as the session's default parallelism (2)."""
    return spark.createDataFrame(ROWS, "device string, sensor string, block long, value double")


def _exchanges(frame: DataFrame) -> int:
    return str(frame._jdf.queryExecution().executedPlan().toString()).count("Exchange")


def test_the_groups_are_those_of_grouping_sets(spark: SparkSession) -> None:
    frame = _frame(spark)
    sets = [["device", "sensor"], ["device", "block"], []]
    keys = {c: F.col(c) for c in ("device", "sensor", "block")}
    aggregated = [F.count(F.lit(1)).alias("n"), F.sum("value").alias("total")]
    exploded = frame.select(grouping_sets(keys, sets), "value").groupBy(*grouped_by(keys)).agg(*aggregated)
    expected = frame.groupingSets(sets, *keys).agg(F.grouping_id().alias(SET), *aggregated)

    def rows(found: DataFrame) -> list[tuple[object, ...]]:
        return sorted((tuple(r[c] for c in (*keys, "n", "total")) for r in found.collect()), key=repr)

    assert rows(exploded) == rows(expected)
    # A group whose keys are all null in one set is its own group in each set, as with grouping sets.
    assert len(exploded.collect()) == len(expected.collect()) == 9


def test_one_partition_is_summarized_without_a_shuffle(spark: SparkSession) -> None:
    keys = {c: F.col(c) for c in ("device", "sensor", "block")}

    def summary(frame: DataFrame) -> DataFrame:
        exploded = frame.select(grouping_sets(keys, [["device", "sensor"], ["device", "block"]]), "value")
        return exploded.groupBy(*grouped_by(keys)).agg(F.sum("value"))

    assert _exchanges(summary(_frame(spark).coalesce(1))) == 0
    assert _exchanges(summary(_frame(spark))) == 1
    by_expand = _frame(spark).coalesce(1).groupingSets([["device"], ["block"]], "device", "block")
    assert _exchanges(by_expand.sum()) == 1, "Spark's own grouping sets shuffle a single partition"


def test_a_small_batch_is_read_in_one_task(spark: SparkSession) -> None:
    frame = _frame(spark)
    assert one_task_if_small(frame, ONE_TASK_RECORDS, tasks=2).rdd.getNumPartitions() == 1
    assert one_task_if_small(frame, ONE_TASK_RECORDS + 1, tasks=2) is frame
    assert one_task_if_small(frame, None, tasks=2) is frame, "unknown size: as read"
    assert one_task_if_small(frame, 1, tasks=1) is frame, "already one task"


def test_a_batch_counts_its_records_from_the_offset_log(tmp_path: Path) -> None:
    offsets = tmp_path / "offsets"
    offsets.mkdir()

    def log(batch: int, ends: dict[str, int]) -> None:
        meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})
        (offsets / str(batch)).write_text(f"v1\n{meta}\n{json.dumps({'readings': ends})}")

    log(4, {"0": 10, "1": 20})
    log(5, {"0": 15, "1": 27})
    log(6, {"0": 15, "1": 27, "2": 3})
    assert batch_records(str(tmp_path), 5) == 12
    assert batch_records(str(tmp_path), 4) is None, "the batch before is not there"
    assert batch_records(str(tmp_path), 6) is None, "a new partition"
