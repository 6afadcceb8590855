"""A readings partition that read nothing runs no task while its fold would change nothing
(partition_fold.IdlePartitions, device_windows.idle_through): the rule is exact, checked here
against the fold itself over seeded random histories, and the driver's memory of it."""

from __future__ import annotations

import math
import random
from typing import Any, cast

import pytest
from kafka import TopicPartition
from pikit_spark.device_windows import ON_TIME, Timing, fold, horizon_at, idle_through
from pikit_spark.partition_fold import Folded, IdlePartitions, PartitionBatch, Writer, fold_batch
from pikit_spark.partition_sink import Slice
from pikit_spark.state import Tables
from pikit_spark.window_fold import WindowFolder
from pyspark.sql import DataFrame, Row

T0 = 1_790_000_040
TIMING = Timing(window_s=60, slack_s=10, horizon_s=300)
SEED = 20261204


def window_row(device: str, metric: str, seq: int, ts: float, value: float) -> Row:
    """One reading as the summary's row of its window (kind "window")."""
    start = int(ts // TIMING.window_s * TIMING.window_s)
    return Row(
        kind=ON_TIME,
        device=device,
        sensor="sim",
        metric=metric,
        window_start=start,
        unit="C",
        n=1,
        mean=value,
        m2=0.0,
        min=value,
        max=value,
        high_seq=seq,
        high_ts=ts,
    )


def test_a_fold_of_nothing_changes_nothing_until_the_horizon_passes_idle_through() -> None:
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    checked = {"unchanged": 0, "changed": 0}
    for _ in range(200):
        state: Tables = {"windows": [], "devices": []}
        now, seqs = float(T0), {f"d{i}": 0 for i in range(rng.randint(1, 4))}
        for _ in range(rng.randint(1, 6)):
            now += rng.uniform(1, 400)
            rows = []
            for device in rng.sample(sorted(seqs), rng.randint(0, len(seqs))):
                for _ in range(rng.randint(1, 5)):
                    seqs[device] += 1
                    at = now - rng.uniform(0, 200)  # a spooled reading comes late
                    rows.append(window_row(device, rng.choice(["t", "h"]), seqs[device], at, rng.random()))
            state = fold(rows, state, now, TIMING).state
        through = idle_through(state)
        later = now + rng.uniform(0, 900)
        step = fold([], state, later, TIMING)
        if horizon_at(later, TIMING) <= through:
            assert step.closed == [] and step.state == state, (state, later)
            checked["unchanged"] += 1
        else:
            assert step.state != state, "past idle_through a fold of nothing closes something"
            checked["changed"] += 1
    assert min(checked.values()) > 20, checked


def test_a_state_without_devices_is_idle_for_ever() -> None:
    assert idle_through({"windows": [], "devices": []}) == math.inf


def batch_of(slices: dict[int, tuple[int, int]], processed_at: float) -> PartitionBatch:
    writer = Writer("app", ("out",), "state", {}, {})
    parts = {k: Slice(TopicPartition("readings", k), a, b) for k, (a, b) in slices.items()}
    return PartitionBatch(1, processed_at, parts, writer, WindowFolder(TIMING, lambda step: {}))


@pytest.mark.parametrize(
    ("told", "needed"),
    [
        ([], [0, 1, 2]),  # a driver's first batch: nothing known
        ([Folded(0, 3, idle_through=T0), Folded(1, 0, idle_through=math.inf)], [0, 2]),
        ([Folded(0, 3, idle_through=T0 + 600), Folded(1, 0, idle_through=math.inf), Folded(2, 0)], [2]),
        ([Folded(0, None, idle_through=T0 + 600)], [0, 1, 2]),  # committed before: not known
    ],
)
def test_the_driver_runs_the_tasks_it_cannot_tell_are_idle(told: list[Folded], needed: list[int]) -> None:
    idle = IdlePartitions()
    idle.learn(told)
    # At T0 + 620 the horizon ends at T0 + 300; partition 2 read something whatever was told.
    assert idle.needed(batch_of({0: (5, 5), 1: (7, 7), 2: (1, 4)}, T0 + 620)) == needed


def test_a_partition_committed_before_by_another_task_is_forgotten() -> None:
    idle = IdlePartitions()
    idle.learn([Folded(0, 3, state_rows=4, idle_through=math.inf), Folded(1, 0, state_rows=2)])
    assert idle.state_rows([0, 1]) == 6
    idle.learn([Folded(1, None)])
    assert idle.state_rows([0, 1]) is None
    assert idle.needed(batch_of({0: (5, 5), 1: (7, 7)}, T0)) == [1]


class FailingBatch:
    """A batch's frame whose job fails (a stopped query, a task out of retries) as it is planned."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("the job failed")


def test_a_batch_that_fails_makes_the_driver_forget_every_partition() -> None:
    idle = IdlePartitions()
    idle.learn([Folded(0, 3, idle_through=math.inf), Folded(1, 0, idle_through=math.inf)])
    with pytest.raises(RuntimeError, match="the job failed"):
        fold_batch(cast(DataFrame, FailingBatch()), batch_of({0: (5, 6), 1: (7, 7)}, T0), idle)
    # Partition 1 may have committed before the failure: its task runs again.
    assert idle.needed(batch_of({0: (6, 6), 1: (7, 7)}, T0)) == [0, 1]
