"""A small table that Spark holds in the plan (a LocalRelation), not in an RDD of Python rows.

PySpark's `createDataFrame` of a list makes an RDD of pickled rows: each query that reads it runs
its tasks through Python workers, and a streaming query plans a new one every micro-batch. On the
lab the keyring's table, broadcast to the signature check, cost a 2-task Spark job with Python
workers (about 0.3 s) in every batch of both apps. A LocalRelation is built on the driver's JVM:
its broadcast reads it there and ships it, with no Python on the executors. Its rows are not
printed in the plans (Spark prints a LocalRelation's columns only), so the table may hold keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    StringType,
    StructType,
    _parse_datatype_string,
)

# The column types a local table takes: those whose Java type py4j gives as Spark's rows hold it
# (not bigint: py4j makes a small Python int an Integer, and gives a Java Long back as an int).
_TYPES = (StringType, BinaryType, IntegerType, DoubleType, BooleanType)


def local_table(spark: SparkSession, rows: Iterable[Sequence[Any]], schema: str) -> DataFrame:
    """`rows` (tuples of Python values or None) as a DataFrame of `schema` ("name type, ...": string,
    binary, int, double or boolean columns), held in the driver's plan."""
    struct = _parse_datatype_string(schema)
    if not isinstance(struct, StructType):
        raise ValueError(f"not a table's schema: {schema}")
    odd = [
        f"{f.name} {f.dataType.simpleString()}" for f in struct.fields if not isinstance(f.dataType, _TYPES)
    ]
    if odd:
        raise ValueError(f"a local table takes no column of these types: {', '.join(odd)}")
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    if jvm is None or gateway is None:
        raise RuntimeError("the Spark session has no JVM to build the table in")
    java_rows = jvm.java.util.ArrayList()
    for row in rows:
        if len(row) != len(struct.fields):
            raise ValueError(f"a row of {len(row)} values for {len(struct.fields)} columns ({schema})")
        values = gateway.new_array(jvm.java.lang.Object, len(row))
        for i, (value, field) in enumerate(zip(row, struct.fields, strict=True)):
            values[i] = (
                bytearray(value) if isinstance(field.dataType, BinaryType) and value is not None else value
            )
        java_rows.add(jvm.org.apache.spark.sql.RowFactory.create(values))
    java_schema = jvm.org.apache.spark.sql.types.DataType.fromJson(struct.json())
    return DataFrame(spark._jsparkSession.createDataFrame(java_rows, java_schema), spark)
