"""A small driver-side table joined to a batch's rows without a Spark job of its own.

A micro-batch often needs a few entries of the state the driver holds (the seq marks of the
devices it reads again, the baselines of the keys it judges). A broadcast table costs a Spark
job per batch; a literal map in the plan costs none. Past `LITERAL_MAX` entries the literal's
planning costs more than the job, so the table is broadcast after all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# Entries that go into the plan as a literal map. Past that, a broadcast table: its job costs
# less than planning a long literal (measured: 20,000 entries took 22 s, bench/README.md).
LITERAL_MAX = 200


def looked_up(
    rows: DataFrame, entries: Mapping[Any, Any], key: list[str], value_type: str, name: str
) -> DataFrame:
    """`rows` with a column `name`: the entry of the row's `key` columns (null when absent).
    `entries` map the key's values (a tuple, or one value) to a value of `value_type` (a tuple
    for a struct)."""
    if len(entries) > LITERAL_MAX:
        keys = ", ".join(f"{k} string" for k in key)
        table = [(*_parts(k), v) for k, v in entries.items()]
        frame = rows.sparkSession.createDataFrame(table, f"{keys}, {name} {value_type}")
        return rows.join(F.broadcast(frame), key, "left")
    if not entries:
        return rows.withColumn(name, F.lit(None).cast(value_type))

    def pair(k: Any, v: Any) -> list[Column]:
        named = [F.lit(part).alias(column) for part, column in zip(_parts(k), key, strict=True)]
        value = F.struct(*(F.lit(part) for part in v)) if isinstance(v, tuple) else F.lit(v)
        return [F.struct(*named) if len(key) > 1 else F.lit(k), value.cast(value_type)]

    found = F.create_map(*(column for k, v in sorted(entries.items()) for column in pair(k, v)))
    row_key = F.struct(*key) if len(key) > 1 else F.col(key[0])
    return rows.withColumn(name, F.element_at(found, row_key))


def _parts(key: Any) -> tuple[Any, ...]:
    return key if isinstance(key, tuple) else (key,)
