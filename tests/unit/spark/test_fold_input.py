"""A fold task folds its partition only when it was given all of its rows
(partition_fold.complete): PySpark takes an input that Spark ended early for the end of the data,
and the task would commit the slice's end with part of its rows, or none. The end-to-end bug this
closes lost 10 s of one device's readings when the CA rotation restarted the workers under a fold
(docs/testing.md); tests/integration/test_partition_fold.py makes Spark fail a task's input."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import TopicPartition
from pikit_spark import partition_fold
from pikit_spark.device_windows import ON_TIME, Timing
from pikit_spark.partition_fold import END, TOLD, IncompleteInputError, PartitionBatch, Writer, complete
from pikit_spark.partition_sink import Slice
from pikit_spark.window_fold import WindowFolder
from pyspark.sql import Row


def batch(start: int, end: int) -> PartitionBatch:
    writer = Writer("app", ("out",), "state", {}, {"bootstrap_servers": ["nowhere:9092"]})
    part = Slice(TopicPartition("readings", 0), start, end)
    return PartitionBatch(1, 0.0, {0: part}, writer, WindowFolder(Timing(), lambda step: {}))


def rows(kinds: list[str], told: int) -> list[Row]:
    return [Row(kind=kind, partition=0, **{TOLD: told}) for kind in kinds]


def test_every_row_given_is_folded() -> None:
    given = rows([ON_TIME, ON_TIME], told=2)
    assert complete(batch(10, 20), 0, given, second=False) == given


def test_a_second_reads_end_row_is_counted_and_dropped() -> None:
    given = rows([ON_TIME, END], told=2)
    assert complete(batch(10, 20), 0, given, second=True) == given[:1]
    assert complete(batch(10, 20), 0, rows([END], told=1), second=True) == []


@pytest.mark.parametrize("second", [False, True])
def test_rows_cut_short_fail_the_task(second: bool) -> None:
    with pytest.raises(IncompleteInputError, match="given 2 of its \\[5\\] rows"):
        complete(batch(10, 20), 0, rows([ON_TIME, ON_TIME], told=5), second=second)


def test_no_row_for_a_slice_kafka_holds_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []

    def gone(writer: Writer, part: Slice) -> bool:
        asked.append(part)
        return False

    monkeypatch.setattr(partition_fold, "_gone", gone)
    with pytest.raises(IncompleteInputError, match="given 0 of its"):
        complete(batch(10, 20), 0, [], second=False)
    assert asked, "Kafka was asked whether the slice's records are still there"


def test_no_row_for_a_slice_retention_deleted_folds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_fold, "_gone", lambda writer, part: True)
    assert complete(batch(10, 20), 0, [], second=False) == []


def test_no_row_for_a_slice_that_read_nothing_folds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_fold, "_gone", lambda writer, part: pytest.fail("no need to ask"))
    assert complete(batch(20, 20), 0, [], second=False) == []


def test_a_second_read_without_its_end_row_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_fold, "_gone", lambda writer, part: True)
    with pytest.raises(IncompleteInputError):
        complete(batch(10, 20), 0, [], second=True)
