"""The Spark apps' exactly-once Kafka sink against a real broker: replays, zombies, restarts."""

from __future__ import annotations

import sys
import uuid
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError

from pikit.topic import read_to_end
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "spark_apps"))

from pikit_spark.sink import Record, TransactionalSink


def _topic(broker: str) -> str:
    name = f"out-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=[broker])
    try:
        admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
    finally:
        admin.close()
    return name


def _batch(batch_id: int, n: int = 3) -> list[Record]:
    return [(f"dev-{i % 2}".encode(), f"{batch_id}:{i}".encode(), [("reason", b"why")]) for i in range(n)]


def test_each_batch_lands_once_across_replays_zombies_and_restarts(broker: str) -> None:
    topic = _topic(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}

    sink = TransactionalSink(topic, "test-app", client)
    assert sink.written_through() == -1
    assert sink.write(0, _batch(0)) == 3
    assert sink.write(0, _batch(0)) is None, "a replayed batch is skipped"
    assert sink.write(1, _batch(1)) == 3

    # The driver dies with batch 2 half sent: its transaction is open, never committed.
    zombie = sink.producer()
    zombie.begin_transaction()
    zombie.send(topic, key=b"dev-0", value=b"2:half")
    zombie.flush()

    # The restarted driver replays batch 1 (skipped) and writes batch 2 in full.
    restarted = TransactionalSink(topic, "test-app", client)
    assert restarted.write(1, _batch(1)) is None
    assert restarted.write(2, _batch(2)) == 3
    assert restarted.written_through() == 2
    restarted.close()
    with pytest.raises(KafkaError):  # the old driver, were it still alive, is fenced off
        sink.write(3, _batch(3))

    records = read_to_end(topic, **client)
    values = sorted(r.value for r in records)
    assert values == sorted(f"{b}:{i}".encode() for b in range(3) for i in range(3))
    assert all(r.headers == [("reason", b"why")] for r in records)
    assert {r.key for r in records} == {b"dev-0", b"dev-1"}


def test_sinks_of_different_apps_do_not_share_a_marker(broker: str) -> None:
    topic = _topic(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}
    first, second = TransactionalSink(topic, "app-a", client), TransactionalSink(topic, "app-b", client)
    assert first.write(5, _batch(5, 1)) == 1
    assert second.write(5, _batch(5, 1)) == 1
    first.close()
    second.close()
    assert len(read_to_end(topic, **client)) == 2
