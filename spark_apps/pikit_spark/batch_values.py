"""Numbers that change every micro-batch (its time, the late horizon) in a form that Spark's
generated code takes by reference.

Spark compiles each stage of a plan into Java source and caches the compiled class by that
source. A literal of a number or timestamp type is written into the source, so a batch time in
the plan makes new source and a new compile every micro-batch (Janino: two classes, 100-150 ms
on a laptop core, more on a Pi). A decimal literal is passed to the class as a reference
instead: the source, and so the compiled class, stays the same from batch to batch. The other
side of a comparison is a decimal too, because a decimal compared with a double or a long
would be cast, and folded, back to a number that is inlined.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

# Eighteen digits: Spark keeps such a decimal in a long (no BigDecimal per row), and a long cast
# to it is no widening cast that the optimizer would unwrap into a comparison of longs.
_SECONDS = "decimal(18,0)"
_DECIMAL_SAFE = 1e14  # far beyond any timestamp, and far within eighteen digits


def whole_seconds(value: Column | int) -> Column:
    """Whole seconds as a decimal. A literal, or an expression Spark folds into one (the batch
    time in a stream), stays a literal: of the decimal type, passed by reference."""
    return (value if isinstance(value, Column) else F.lit(value)).cast(_SECONDS)


def at_most(seconds: Column, limit: Column) -> Column:
    """seconds (a number) <= limit (whole_seconds); null for a number far beyond any timestamp."""
    return F.when(F.abs(seconds) < _DECIMAL_SAFE, F.ceil(seconds).cast(_SECONDS) <= limit)
