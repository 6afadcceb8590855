"""Count, mean and M2 (the sum of squared deviations) of a value: what both apps keep per
group. Aggregated in one pass by Spark, and two of them pooled exactly on the driver (Chan
et al.), so that a window or a baseline merged batch by batch equals one computed over all
its readings."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

Moments = tuple[float, float, float]  # n, mean, m2


def aggregates(value: str) -> list[Column]:
    """n, mean and m2 of `value` over a group (numbers only: Spark keeps them in a hash map)."""
    n = F.count(F.lit(1))
    return [n.alias("n"), F.avg(value).alias("mean"), (F.var_pop(value) * n).alias("m2")]


def pool(a: Moments, b: Moments) -> Moments:
    """Chan et al.'s merge of two (n, mean, m2); n keeps its type (an int stays an int)."""
    n = a[0] + b[0]
    delta = b[1] - a[1]
    return n, a[1] + delta * b[0] / n, a[2] + b[2] + delta * delta * a[0] * b[0] / n
