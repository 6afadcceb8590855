"""Grouping sets that keep a batch's partitioning, so that a batch read in one task is summarized
in that task.

Spark plans `groupingSets` as an Expand, whose output has no known partitioning: the aggregate
after it always shuffles, a stage of its own, even when its input is one partition. The same
groups made by an explode (one struct per set, the columns outside the set null, the set's index
beside them as Spark's grouping id is) keep the input's partitioning: on one partition the
aggregate needs no shuffle (checked on a local Spark 4.2: no Exchange in the plan). On many
partitions it shuffles as the Expand did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

GROUP = "_group"
SET = "grouping_set"  # which set a row's group is of: 0, 1, ... in the order given


def grouping_sets(keys: Mapping[str, Column], sets: Sequence[Sequence[str]]) -> Column:
    """An explode into one row per set: a struct of `keys` (name -> value) with those outside the
    set null, and the set's index as `grouping_set`. Aggregate it by `grouped_by(keys)`."""
    unknown = {name for chosen in sets for name in chosen} - set(keys)
    if unknown:
        raise ValueError(f"grouping sets name columns that are not keys: {sorted(unknown)}")

    def key(name: str, value: Column, chosen: Sequence[str]) -> Column:
        # Outside the set, a null of the key's own type: CASE WHEN false folds into one.
        return (value if name in chosen else F.when(F.lit(False), value)).alias(name)

    structs = [
        F.struct(F.lit(index).alias(SET), *(key(name, value, chosen) for name, value in keys.items()))
        for index, chosen in enumerate(sets)
    ]
    return F.explode(F.array(*structs)).alias(GROUP)


def grouped_by(keys: Mapping[str, Column] | Sequence[str]) -> list[Column]:
    """The columns to group `grouping_sets`' rows by: the set's index, then the keys, by name."""
    return [F.col(f"{GROUP}.{name}").alias(name) for name in (SET, *keys)]
