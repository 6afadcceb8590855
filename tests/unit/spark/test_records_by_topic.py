"""The driver fetches every output of a micro-batch in one Spark job, each row under its topic."""

from __future__ import annotations

from pikit_spark.sink import records_by_topic
from pyspark.sql import SparkSession


def test_rows_keep_their_topic_key_value_and_headers_and_an_empty_output_is_an_empty_list(
    spark: SparkSession,
) -> None:
    windows = spark.createDataFrame([(b"edge-1", b"w1"), (None, b"w2")], "key binary, value binary")
    dead = spark.createDataFrame(
        [(b"k", b"not json", [("reason", b"not JSON")])],
        "key binary, value binary, headers array<struct<key:string,value:binary>>",
    )
    late = dead.limit(0)
    spark.sparkContext.setJobGroup("records_by_topic", "the fetch under test")
    try:
        out = records_by_topic({"aggregates": windows, "late": late, "dead": dead})
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert sorted(out["aggregates"], key=str) == sorted([(b"edge-1", b"w1", []), (None, b"w2", [])], key=str)
    assert out["late"] == []
    assert out["dead"] == [(b"k", b"not json", [("reason", b"not JSON")])]
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup("records_by_topic")) == 1
