"""Count, mean and M2 (the sum of squared deviations) of a value: what both apps keep per
group. Aggregated in one pass, and two of them pooled exactly (Chan et al.), so that a
window or a baseline merged batch by batch equals one computed over all its readings."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def aggregates(value: str) -> list[Column]:
    """n, mean and m2 of `value` over a group (numbers only: Spark keeps them in a hash map)."""
    n = F.count(F.lit(1))
    return [n.alias("n"), F.avg(value).alias("mean"), (F.var_pop(value) * n).alias("m2")]


def moments(n: str, mean: str, m2: str) -> Column:
    """The (n, mean, m2) struct of three columns; a side without the group counts as empty."""
    return F.struct(
        F.coalesce(n, F.lit(0)).alias("n"),
        F.coalesce(mean, F.lit(0.0)).alias("mean"),
        F.coalesce(m2, F.lit(0.0)).alias("m2"),
    )


def pool(a: Column, b: Column) -> Column:
    """Chan et al.'s merge of two (n, mean, m2) structs."""
    n = a["n"] + b["n"]
    delta = b["mean"] - a["mean"]
    return F.struct(
        n.alias("n"),
        (a["mean"] + delta * b["n"] / n).alias("mean"),
        (a["m2"] + b["m2"] + delta * delta * a["n"] * b["n"] / n).alias("m2"),
    )
