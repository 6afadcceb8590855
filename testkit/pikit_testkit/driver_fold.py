"""sensor_aggregates' fold as its driver ran it until 2026-12-04: one Spark job summarizes the
whole batch, the summary is fetched to the driver, and the driver folds it against every device's
state (`device_windows.fold`). The app now folds each readings partition in the task that holds it
(pikit_spark/window_fold.py); this one stays as the model those tasks are checked against
(tests/integration/test_partition_fold.py, tests/unit/spark/test_device_windows.py) and as
`bench.fold_placement`'s driver contender. It composes the app's own summary and fold, so it checks
how the tasks split, route and read a batch twice, not the window rules: pikit_testkit's
pipeline_model does that, from the rules alone."""

from __future__ import annotations

import functools
from collections.abc import Callable

from pikit_spark.device_windows import Advance, Timing, fold, horizon_at, summarize, undecided
from pikit_spark.state import Tables
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F


def advance(rows: DataFrame, processed_at: float, state: Tables, timing: Timing) -> Advance:
    """One micro-batch and the state before it -> closed windows, late readings, dead letters,
    the state after it.

    `rows` are parse()'s verdicts (pikit_spark/readings.py), or valid readings alone (device,
    seq, sensor, metric, value, unit, ts). The batch is read once, by `summarize`, into rows
    whose number follows the windows and the devices, not the readings; they are fetched to
    the driver in the same Spark job, and `fold` computes everything else there. A resend
    within the batch (the same device and seq twice) is found by the summary's seq blocks;
    only then are the readings of the devices concerned read a second time, deduplicated
    reading by reading.
    """
    horizon_end = horizon_at(processed_at, timing)

    def with_marks(again: DataFrame, redo: list[str]) -> DataFrame:
        chosen = set(redo)
        marks = {device: (seq, closed) for device, seq, _, closed in state["devices"] if device in chosen}
        return summarize(again, marks, horizon_end, timing, seq_blocks=False)

    # The batch is summarized without the devices' marks (no table of every device made on
    # the driver, nor put in the plan); the few devices whose rows the marks would change are
    # summarized again with theirs.
    summary = once_per_seq(
        summarize(rows, {}, horizon_end, timing),
        rows,
        with_marks,
        undecided=lambda fetched: undecided(fetched, state["devices"], timing),
    )
    return fold(summary, state, processed_at, timing)


def once_per_seq(
    summary: DataFrame,
    rows: DataFrame,
    resummarize: Callable[[DataFrame, list[str]], DataFrame],
    undecided: Callable[[list[Row]], set[str]] = lambda _: set(),
) -> list[Row]:
    """The summary's rows, fetched to the driver without its seq blocks (rows of a null
    `kind`), where every device whose seqs repeat in the batch, or that `undecided` names from
    the fetched rows, is summarized again by `resummarize` from its rows deduplicated by
    (device, seq) (one copy kept: a resend is the same reading), which is also told those
    devices.

    `summary` may be made without the devices' marks (no broadcast job): `undecided` then
    names the devices whose rows the marks would have changed (a seq at or below the mark, a
    window the device had closed), and `resummarize` applies the marks to those alone.
    One Spark job in the common case: only the blocks that hold a seq twice are fetched."""
    is_block, fetched_rows = block_filters()
    fetched = summary.where(fetched_rows).collect()
    plain = [r for r in fetched if r["kind"] is not None]
    redo = sorted({r["device"] for r in fetched if r["kind"] is None} | undecided(plain))
    kept = [r for r in plain if r["device"] not in redo]
    if not redo:
        return kept
    again = resummarize(rows.where(F.col("device").isin(redo)).dropDuplicates(["device", "seq"]), redo)
    return kept + again.where(~is_block).collect()


@functools.cache
def block_filters() -> tuple[Column, Column]:
    """A summary's seq-block rows, and the rows that `once_per_seq` fetches: built once, as each
    PySpark function is a round trip to the driver's JVM."""
    is_block = F.col("kind").isNull()
    return is_block, ~is_block | (F.col("n") > F.bit_count("seq_bits"))
