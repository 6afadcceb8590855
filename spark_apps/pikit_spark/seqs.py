"""Each reading once: by (device, seq), without a per-reading shuffle in the common case.

A device's readings arrive in `seq` order (one partition per device, an idempotent
producer), so a reading at or below the device's high-water mark is a resend after an
agent crash: one row of state per device drops it. A resend within one micro-batch is
found while the batch is summarized: beside its other groups, a summary groups each
device's readings by blocks of 64 seqs, counting them and setting a bit per seq. A block
with more readings than bits holds a seq twice (`repeating`); only then are that device's
readings read again and deduplicated one by one (partition_fold's second read).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from pikit_spark.lookup import looked_up

_BLOCK_BITS = 6  # blocks of 64 seqs: one bit each in a long
BLOCK_KEY = ["device", "seq_block"]
_ALL_BITS = (1 << 64) - 1


def block_columns(counted: Column) -> list[Column]:
    """`seq_block` and `seq_bit` of the rows where `counted` holds (null elsewhere)."""
    return [
        F.when(counted, F.shiftright("seq", _BLOCK_BITS)).alias("seq_block"),
        F.when(counted, F.expr(f"shiftleft(1L, seq & {(1 << _BLOCK_BITS) - 1})")).alias("seq_bit"),
    ]


def block_aggregates() -> list[Column]:
    return [F.bit_or("seq_bit").alias("seq_bits")]


def at_or_below(marks: dict[str, int], device: str | None, low_seq: int | None) -> bool:
    """Whether a summary row holds a seq at or below its device's high-water mark: a resend."""
    return device in marks and low_seq is not None and low_seq <= marks[device]


def above_marks(
    rows: DataFrame, marks: Mapping[str, Sequence[int]], names: Sequence[str] = ("high_seq",)
) -> DataFrame:
    """The rows above their device's high-water mark (every row of a device without one, and
    of a dead letter, which has no device), beside the mark's other values as columns
    `names[1:]` (null for a device without a mark). `marks` map a device to its mark's values,
    the high seq first: the few devices a batch reads again, so they go into the plan as a
    literal (pikit_spark/lookup.py) and cost no Spark job. Without marks, `rows` as they are:
    no columns added (each step of a plan is analyzed again, 30-60 ms on the lab)."""
    if not marks:
        return rows
    value_type = "struct<" + ",".join(f"{name}:long" for name in names) + ">"
    entries = {device: tuple(values) for device, values in marks.items()}
    marked = looked_up(rows, entries, ["device"], value_type, "_mark")
    high = F.col(f"_mark.{names[0]}")
    above = marked.where(high.isNull() | (F.col("seq") > high))
    return above.select(*rows.columns, *(F.col(f"_mark.{name}").alias(name) for name in names[1:]))


def repeating(rows: Iterable[Row]) -> set[str]:
    """The devices that hold a seq twice among the rows of a summary made `by_partition`
    (device_windows.summarize), whose seq blocks are columns of the window rows: a device's
    block whose readings, over all its rows, outnumber the seqs its bits count."""
    blocks: dict[tuple[str, int], tuple[int, int]] = {}
    for row in rows:
        if row["seq_block"] is None:
            continue  # a dead letter
        key = (row["device"], row["seq_block"])
        n, bits = blocks.get(key, (0, 0))
        blocks[key] = (n + row["n"], bits | row["seq_bits"])
    # A long's top bit makes it negative: its 64 bits counted as Spark's bit_count counts them.
    return {device for (device, _), (n, bits) in blocks.items() if n > (bits & _ALL_BITS).bit_count()}
