"""One readings partition's batches committed by the task that folded them (pikit_spark/
partition_sink.py), against a real broker: each partition's outputs, state and offset commit
together and apart from the others'; a writer on another worker resumes from Kafka alone; a
fenced worker folds on what the other committed; a slice the group has moved past is refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from pikit_spark.changelog import read_state
from pikit_spark.partition_sink import Fold, PartitionSink, Slice
from pikit_spark.sink import Change, SupersededError
from pikit_spark.state import Tables
from pikit_testkit.broker import COMPACTED, new_topic

from pikit.topic import read_to_end

SCHEMAS = {"counts": "device STRING, n BIGINT"}


def _topics(broker: str) -> tuple[str, str, str]:
    return (
        new_topic(broker, "readings"),
        new_topic(broker, "out", 1),
        new_topic(broker, "state", 2, COMPACTED),
    )


def counting(out: str, devices: list[str]) -> Fold:
    """A fold that counts each device's readings, and sends each count it changed."""

    def fold(state: Tables) -> tuple[Mapping[str, Iterable[Change]], Tables]:
        counts: dict[str, int] = dict(state["counts"])
        for device in devices:
            counts[device] = counts.get(device, 0) + 1
        sent: list[Change] = [(d.encode(), str(counts[d]).encode(), []) for d in sorted(set(devices))]
        return {out: sent}, {"counts": sorted(counts.items())}

    return fold


def _writer(app: str, partition: int, out: str, state: str, broker: str) -> PartitionSink:
    return PartitionSink(app, partition, [out], state, SCHEMAS, {"bootstrap_servers": [broker]}, retry_for=30)


def _held(app: str, partitions: list[TopicPartition], broker: str) -> dict[int, int]:
    consumer = KafkaConsumer(
        bootstrap_servers=[broker], group_id=f"pikit-spark-{app}", enable_auto_commit=False
    )
    try:
        return {tp.partition: consumer.committed(tp) for tp in partitions}
    finally:
        consumer.close()


def _counts(state: str, partition: int, broker: str) -> dict[str, int]:
    tables = read_state(state, SCHEMAS, {"bootstrap_servers": [broker]}, partition=partition)
    return dict(tables["counts"])


def _sent(out: str, broker: str) -> list[tuple[str, str]]:
    return [(r.key.decode(), r.value.decode()) for r in read_to_end(out, bootstrap_servers=[broker])]


def test_each_partition_commits_its_own_slice_and_a_new_worker_resumes_from_kafka(broker: str) -> None:
    readings, out, state = _topics(broker)
    tp0, tp1 = TopicPartition(readings, 0), TopicPartition(readings, 1)
    app = f"app-{uuid.uuid4().hex[:6]}"
    first0, first1 = _writer(app, 0, out, state, broker), _writer(app, 1, out, state, broker)
    assert first0.commit(0, Slice(tp0, 0, 3), counting(out, ["a", "a", "b"])) == 4  # 2 counts, 2 states
    assert first1.commit(0, Slice(tp1, 0, 1), counting(out, ["c"])) == 2
    assert _held(app, [tp0, tp1], broker) == {0: 3, 1: 1}
    # Each device's state in its readings' partition, whatever the key's hash would choose.
    assert _counts(state, 0, broker) == {"a": 2, "b": 1}
    assert _counts(state, 1, broker) == {"c": 1}
    first0.close()

    # Another worker (a driver started anywhere): the committed slice is not written again, and
    # the next one folds on the state read back from Kafka.
    other0 = _writer(app, 0, out, state, broker)
    assert other0.commit(0, Slice(tp0, 0, 3), counting(out, ["a", "a", "b"])) is None
    assert other0.commit(1, Slice(tp0, 3, 5), counting(out, ["a", "b"])) == 4
    assert _counts(state, 0, broker) == {"a": 3, "b": 2}
    assert _held(app, [tp0, tp1], broker) == {0: 5, 1: 1}
    assert _sent(out, broker) == [("a", "2"), ("b", "1"), ("c", "1"), ("a", "3"), ("b", "2")]
    other0.close()
    first1.close()


def _two_workers(broker: str) -> tuple[TopicPartition, str, str, PartitionSink, PartitionSink]:
    """Partition 0 of new topics, and two writers of it (on two Python workers, say)."""
    readings, out, state = _topics(broker)
    app = f"app-{uuid.uuid4().hex[:6]}"
    one, two = _writer(app, 0, out, state, broker), _writer(app, 0, out, state, broker)
    return TopicPartition(readings, 0), out, state, one, two


def test_a_fenced_worker_folds_on_what_the_other_committed(broker: str) -> None:
    tp0, out, state, one, two = _two_workers(broker)
    assert one.commit(0, Slice(tp0, 0, 2), counting(out, ["a", "a"])) == 2
    assert two.commit(1, Slice(tp0, 2, 3), counting(out, ["a"])) == 2  # fences one
    # Back on the first worker: its producer fenced, its state one batch old. It must fold on the
    # second's commit, not on its own memory.
    assert one.commit(2, Slice(tp0, 3, 4), counting(out, ["a"])) == 2
    assert _counts(state, 0, broker) == {"a": 4}
    # It read the partition whole once, at its first batch; then only the other's commit.
    assert (one.state_reads, one.catch_ups) == (1, 1)
    # The move's cost, as the batch's log line names it: a fresh producer fenced the other (the
    # stale one, whose commit was behind the batch's start, was closed unused), the group read,
    # the catch-up.
    assert [step for step, _ in one.steps.parts] == ["fence", "group", "state", "fold", "commit"]
    # Fenced by a copy of its own last batch, which wrote nothing: the first worker's memory is
    # still right, and its next batch goes through once it has a producer again.
    assert two.commit(2, Slice(tp0, 3, 4), counting(out, ["a"])) is None
    assert one.commit(3, Slice(tp0, 4, 5), counting(out, ["a"])) == 2
    assert _counts(state, 0, broker) == {"a": 5}
    # Its producer was fenced by the copy: the first attempt's commit failed, then a fresh producer
    # fenced the copy; the state it held is the group's, so nothing was read.
    steps = [step for step, _ in one.steps.parts]
    assert steps == ["state", "fold", "fenced", "fence", "group", "state", "fold", "commit"]
    assert (one.state_reads, one.catch_ups) == (1, 1)
    assert one.commit(4, Slice(tp0, 5, 6), counting(out, ["a"])) == 2
    assert [step for step, _ in one.steps.parts] == ["state", "fold", "commit"]  # nothing moved
    assert [value for _, value in _sent(out, broker)] == ["2", "3", "4", "5", "6"]
    one.close()
    two.close()


def test_a_worker_catches_up_with_a_device_another_worker_removed(broker: str) -> None:
    tp0, out, state, one, two = _two_workers(broker)
    assert one.commit(0, Slice(tp0, 0, 2), counting(out, ["a", "b"])) == 4

    def forget_b(before: Tables) -> tuple[Mapping[str, Iterable[Change]], Tables]:
        return {}, {"counts": [row for row in before["counts"] if row[0] != "b"]}

    assert two.commit(1, Slice(tp0, 2, 3), forget_b) == 1  # b's tombstone
    # The first worker's memory holds b; the tombstone it catches up with removes it.
    assert one.commit(2, Slice(tp0, 3, 4), counting(out, ["a"])) == 2
    assert (one.state_reads, one.catch_ups) == (1, 1)
    assert _counts(state, 0, broker) == {"a": 2}
    one.close()
    two.close()


@pytest.mark.parametrize(("start", "end"), [(2, 6), (7, 9)], ids=["overlaps", "leaves-a-gap"])
def test_a_slice_the_group_has_moved_past_is_refused(broker: str, start: int, end: int) -> None:
    readings, out, state = _topics(broker)
    tp0 = TopicPartition(readings, 0)
    app = f"app-{uuid.uuid4().hex[:6]}"
    writer = _writer(app, 0, out, state, broker)
    assert writer.commit(0, Slice(tp0, 0, 5), counting(out, ["a"] * 5)) == 2
    stale = _writer(app, 0, out, state, broker)  # a task of another query of the app
    with pytest.raises(SupersededError, match="holds 5"):
        stale.commit(7, Slice(tp0, start, end), counting(out, ["a"] * (end - start)))
    assert _counts(state, 0, broker) == {"a": 5}
    assert _sent(out, broker) == [("a", "5")]
    assert _held(app, [tp0], broker) == {0: 5}
    writer.close()
    stale.close()


def test_a_partition_that_read_nothing_commits_only_what_changed(broker: str) -> None:
    readings, out, state = _topics(broker)
    tp0 = TopicPartition(readings, 0)
    app = f"app-{uuid.uuid4().hex[:6]}"
    writer = _writer(app, 0, out, state, broker)
    assert writer.commit(0, Slice(tp0, 0, 1), counting(out, ["a"])) == 2

    def close_a(state_before: Tables) -> tuple[Mapping[str, Iterable[Change]], Tables]:
        # What a silent device's windows do at the horizon: closed by time, with nothing read.
        counts: dict[str, int] = dict(state_before["counts"])
        if "a" not in counts:
            return {}, state_before
        return {out: [(b"a", b"closed", [])]}, {"counts": [(d, n) for d, n in counts.items() if d != "a"]}

    assert writer.commit(1, Slice(tp0, 1, 1), close_a) == 2  # the output and a's tombstone
    assert writer.commit(1, Slice(tp0, 1, 1), close_a) == 0  # again: nothing left to close
    fresh: dict[str, Any] = {}
    assert _counts(state, 0, broker) == fresh
    assert _sent(out, broker) == [("a", "1"), ("a", "closed")]
    writer.close()
