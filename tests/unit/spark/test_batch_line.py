"""A streaming app's log line of a batch: what its partitions wrote, and where the slowest one's
time went, which is what an operator reads when a batch was slow."""

from __future__ import annotations

from pikit_spark.alert_fold import AlertFolder
from pikit_spark.partition_fold import Folded, batch_line
from pikit_spark.window_fold import WindowFolder


def told(folded: list[Folded], idle: list[int] | None = None) -> str:
    return batch_line(folded, WindowFolder.counted, idle)


def test_the_line_names_the_slowest_partition_and_its_steps() -> None:
    folded = [
        Folded(0, 0, host="pi-2", steps=(("state", 0.0), ("fold", 0.01))),
        Folded(
            1,
            5,
            counts={"windows_closed": 2},
            catch_ups=1,
            host="pi-3",
            steps=(("fence", 0.25), ("group", 0.04), ("state", 0.15), ("fold", 0.01), ("commit", 0.3)),
        ),
        Folded(2, None, host="pi-2"),
    ]
    assert told(folded) == (
        "committed 5 records of 2 partitions on pi-2, pi-3: 2 windows closed, 0 late, 0 dead letters; "
        "partitions [2] committed before; the state of [1] caught up with another worker's commits; "
        "slowest partition 1 on pi-3: 0.75s (fence 0.25s, group 0.04s, state 0.15s, fold 0.01s, commit 0.30s)"
    )


def test_the_line_names_the_partitions_that_ran_no_task() -> None:
    folded = [Folded(3, 2, host="pi-2", steps=(("state", 0.0), ("fold", 0.01), ("commit", 0.1)))]
    assert told(folded, [0, 1, 2, 4, 5]).startswith(
        "committed 2 records of 1 partitions on pi-2: 0 windows closed, 0 late, 0 dead letters; "
        "partitions [0, 1, 2, 4, 5] idle, no task; slowest partition 3"
    )
    assert told([], [0, 1]).startswith("committed 0 records of 0 partitions on no executor")


def test_the_alerts_line_counts_alerts() -> None:
    folded = [
        Folded(0, 3, counts={"alerts": 2}, host="pi-2"),
        Folded(1, 1, counts={"alerts": 1}, host="pi-3"),
    ]
    assert batch_line(folded, AlertFolder.counted).startswith(
        "committed 4 records of 2 partitions on pi-2, pi-3: 3 alerts"
    )
