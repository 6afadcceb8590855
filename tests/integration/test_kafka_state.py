"""The apps' state held in Kafka (docs/design/any-pi-dies.md), against a real broker: a batch's
state changes, outputs and source offsets land together or not at all, a driver started afresh
reads back exactly the state of the last committed batch and skips what was written, and a
device's state lies in the partition number of its readings."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaProducer, TopicPartition
from pikit_spark.changelog import KafkaState, changes, documents, read_state
from pikit_spark.device_windows import STATE_SCHEMAS
from pikit_spark.sink import BoundedProducer, SupersededError, TransactionalSink
from pikit_spark.state import Tables
from pikit_testkit.broker import COMPACTED, new_topic

from pikit.topic import read_to_end

READINGS_PARTITIONS = 6


def _topics(broker: str) -> tuple[str, str, str]:
    readings = new_topic(broker, "readings", READINGS_PARTITIONS)
    return readings, new_topic(broker, "out"), new_topic(broker, "state", READINGS_PARTITIONS, COMPACTED)


def _tables(devices: range, window_start: int, seq: int) -> Tables:
    return {
        "windows": [
            (f"dev-{d}", "sim", metric, "C", window_start, 3, 20.5 + d, 0.25, 20.0, 21.0)
            for d in devices
            for metric in ("temperature", "humidity")
        ],
        "devices": [(f"dev-{d}", seq, 1.7e9 + seq, window_start - 60) for d in devices],
    }


def _same(a: Tables, b: Tables) -> bool:
    return all(sorted(a.get(name, [])) == sorted(b.get(name, [])) for name in STATE_SCHEMAS)


def test_state_offsets_and_outputs_commit_together_and_a_fresh_driver_resumes(broker: str) -> None:
    readings, out, state = _topics(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}
    source = [TopicPartition(readings, p) for p in range(READINGS_PARTITIONS)]
    first = _tables(range(10), 60, 5)
    second = _tables(range(1, 12), 120, 9)  # dev-0 gone, dev-10 and dev-11 new, every row changed

    sink = TransactionalSink([out, state], "state-app", client)
    batch0 = {tp: 10 + tp.partition for tp in source}
    assert sink.write(0, {out: [(b"dev-1", b"w0", [])], state: changes({}, first)}, batch0) == 11
    assert _same(read_state(state, STATE_SCHEMAS, client), first)
    assert sink.committed_source(source) == batch0
    sink.close()

    # A driver started afresh (another Pi, no checkpoint) is handed the same batch again: the
    # group's offsets say it was written, so nothing goes out twice.
    again = TransactionalSink([out, state], "state-app", client)
    assert again.write(0, {out: [(b"dev-1", b"w0", [])], state: changes({}, first)}, batch0) is None
    batch1 = {tp: 20 + tp.partition for tp in source}
    held = KafkaState(state, STATE_SCHEMAS, client)  # the new driver's: read from Kafka once
    assert _same(held.before(), first)
    records = held.changes_to(second)
    assert [key for key, value, _ in records if value is None] == [b"dev-0"]
    assert again.write(1, {out: [(b"dev-2", b"w1", [])], state: records}, batch1) == 1 + 12
    held.committed()
    assert held.changes_to(second) == []
    again.close()
    assert _same(read_state(state, STATE_SCHEMAS, client), second)
    assert sorted(r.value for r in read_to_end(out, **client)) == [b"w0", b"w1"]

    # A batch that never commits (its driver dies with the transaction open) leaves the state and
    # the offsets as they were, and the next driver's producer aborts it.
    zombie = BoundedProducer(**{**client, "transactional_id": "pikit-spark-state-app", "acks": "all"})
    zombie.init_transactions()
    zombie.begin_transaction()
    for key, value, _ in changes(second, _tables(range(3), 180, 12)):
        zombie.send(state, key=key, value=value)
    zombie.send(out, key=b"dev-3", value=b"lost")
    zombie.flush()
    assert _same(read_state(state, STATE_SCHEMAS, client), second)  # past the last stable offset
    successor = TransactionalSink([out, state], "state-app", client)
    assert successor.committed_source(source) == batch1
    successor.producer()  # fences the zombie and aborts its transaction
    successor.close()
    zombie.close(timeout=0)
    assert _same(read_state(state, STATE_SCHEMAS, client), second)
    assert b"lost" not in {r.value for r in read_to_end(out, **client)}


def test_a_devices_state_lies_in_the_partition_of_its_readings(broker: str) -> None:
    readings, _, state = _topics(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}
    tables = _tables(range(40), 60, 1)
    # The agent's producer: keyed by device, Kafka's default partitioner (edge_agent/kafka_link.py).
    agent = KafkaProducer(**client)
    for device in documents(tables):
        agent.send(readings, key=device.encode(), value=b"{}")
    agent.flush()
    agent.close()
    sink = TransactionalSink([state], "aligned-app", client)
    sink.write(0, {state: changes({}, tables)}, {TopicPartition(readings, 0): 1})
    sink.close()

    reading_partition = {r.key: r.partition for r in read_to_end(readings, **client)}
    state_partition = {r.key: r.partition for r in read_to_end(state, **client)}
    assert len(state_partition) == 40
    assert state_partition == reading_partition
    assert len(set(state_partition.values())) == READINGS_PARTITIONS  # 40 devices cover all six


def test_a_driver_whose_batches_another_committed_since_stops_before_writing(broker: str) -> None:
    """Two drivers of one app, the older one cut off while the newer took over: when the older one
    opens a producer again, the group holds offsets it did not commit, and it stops rather than
    write a batch computed from its stale state."""
    readings, out, _ = _topics(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}
    p0 = TopicPartition(readings, 0)
    older = TransactionalSink([out], "superseded-app", client)
    assert older.write(0, {out: [(b"d", b"w0", [])]}, {p0: 10}) == 1
    newer = TransactionalSink([out], "superseded-app", client)  # fences the older one
    assert newer.write(0, {out: [(b"d", b"w1", [])]}, {p0: 20}) == 1
    newer.close()
    older.close()  # its attempt failed (fenced, or the brokers away): the next opens a producer
    with pytest.raises(SupersededError):
        older.write(1, {out: [(b"d", b"stale", [])]}, {p0: 30})
    assert b"stale" not in {r.value for r in read_to_end(out, **client)}
    # Its own commit that landed though the call failed is not another driver's.
    landed = TransactionalSink([out], "superseded-app", client)
    assert landed.write(1, {out: [(b"d", b"w2", [])]}, {p0: 30}) == 1
    landed.close()
    assert landed.write(1, {out: [(b"d", b"w2", [])]}, {p0: 30}) is None
