"""local_table: a small table held in the driver's plan, whose rows the plan never prints."""

from __future__ import annotations

import pytest
from pikit_spark.local_table import local_table
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

SCHEMA = "signer string, inner_pad binary, n int"
SECRET = b"\x13\x37secret-pad"


def test_its_rows_come_back_as_given(spark: SparkSession) -> None:
    rows = [("edge-1", SECRET, 3), ("edge-2", None, None)]
    table = local_table(spark, rows, SCHEMA)
    assert [tuple(row) for row in table.orderBy("signer").collect()] == [
        ("edge-1", bytearray(SECRET), 3),
        ("edge-2", None, None),
    ]
    assert table.schema.simpleString() == "struct<signer:string,inner_pad:binary,n:int>"


def test_it_is_a_local_relation_whose_rows_no_plan_prints(spark: SparkSession) -> None:
    table = local_table(spark, [("edge-1", SECRET, 1)], SCHEMA)
    joined = spark.range(4).withColumn("signer", F.lit("edge-1")).join(F.broadcast(table), "signer", "left")
    plans = joined._jdf.queryExecution().toString()
    # Not an RDD of pickled Python rows (createDataFrame's), which every micro-batch reads again
    # through Python workers to broadcast it.
    assert "LocalRelation" in plans
    assert "ExistingRDD" not in plans and "LogicalRDD" not in plans
    assert SECRET.hex() not in plans.lower() and "secret-pad" not in plans
    assert joined.where(F.col("inner_pad") == F.lit(SECRET)).count() == 4


def test_a_row_of_the_wrong_width_is_refused(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="a row of 2 values for 3 columns"):
        local_table(spark, [("edge-1", SECRET)], SCHEMA)


def test_a_column_of_another_type_is_refused(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="no column of these types: seq bigint, at timestamp"):
        local_table(spark, [("edge-1", 1, None)], "signer string, seq bigint, at timestamp")
