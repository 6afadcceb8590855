"""sensor_aggregates' fold of one readings partition (pikit_spark/partition_fold.py): the task is
given its partition's summary (device_windows.summarize, `by_partition`), not its readings, and
folds it into the partition's windows and seq marks (device_windows.fold)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pyspark.sql import DataFrame, Row

from pikit_spark.device_windows import Advance, Timing, fold, horizon_at, idle_through, summarize, undecided
from pikit_spark.partition_fold import Folder, Mark, PartitionBatch, SecondRead, Step, route
from pikit_spark.seqs import repeating
from pikit_spark.sink import Change
from pikit_spark.state import Tables

# A partition's closed windows, late readings and dead letters -> its records by output topic.
Outputs = Callable[[Advance], Mapping[str, Sequence[Change]]]


@dataclass(frozen=True)
class WindowFolder(Folder):
    timing: Timing
    outputs: Outputs
    # The devices whose newest closed windows a task tells the driver (Step.told), for its gauges
    # (empty: every device); None: none.
    gauged: frozenset[str] | None = None

    counted: ClassVar[Mapping[str, str]] = {
        "windows_closed": "windows closed",
        "late_readings": "late",
        "dead_letters": "dead letters",
    }

    def clock(self, processed_at: float) -> float:
        """The horizon's end: a silent device's windows close when it passes them."""
        return horizon_at(processed_at, self.timing)

    def rows(self, verdicts: DataFrame, partitions: int, batch: PartitionBatch) -> DataFrame:
        horizon_end = horizon_at(batch.processed_at, self.timing)
        return summarize(route(verdicts, partitions), {}, horizon_end, self.timing, by_partition=True)

    def again(self, resent: DataFrame, known: Mapping[str, Mark], batch: PartitionBatch) -> DataFrame:
        horizon_end = horizon_at(batch.processed_at, self.timing)
        return summarize(resent, known, horizon_end, self.timing, by_partition=True)

    def fold(self, rows: list[Row], state: Tables, batch: PartitionBatch, k: int, *, second: bool) -> Step:
        """A device's resends are told by its state: a seq at or below its high-water mark, a window
        it had closed, or a seq twice in the batch (`seqs.repeating`). Those devices are read again,
        summarized once per seq and with their marks."""
        if not second:
            resent = repeating(rows) | undecided(rows, state["devices"], self.timing)
            if resent:
                known = {device: (seq, closed) for device, seq, _, closed in state["devices"]}
                raise SecondRead({device: known.get(device) for device in sorted(resent)})
        step = fold(rows, state, batch.processed_at, self.timing)
        counts = {"windows_closed": len(step.closed), "late_readings": len(step.late)}
        counts["dead_letters"] = len(step.dead)
        return Step(
            dict(self.outputs(step)), step.state, counts, idle_through(step.state), self._gauged(step.closed)
        )

    def _gauged(self, closed: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
        if self.gauged is None:
            return ()
        return tuple(w for w in closed if not self.gauged or w["device"] in self.gauged)
