"""Read a topic up to where it ends now, even while producers keep writing to it: the controller's
tools and tests (pikit.topic) and the Spark apps' state (pikit_spark.changelog) alike."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from kafka import KafkaConsumer, TopicPartition


def read_to_end(
    topic: str,
    timeout: float = 60.0,
    missing_ok: bool = True,
    only: Iterable[int] | None = None,
    **client: Any,
) -> list[Any]:
    """Every record of `topic` (of its partitions in `only`, when given) up to the end offsets seen
    at the start of the call, in each partition's order. A topic that does not exist reads as
    empty, or with `missing_ok` false raises LookupError."""
    # The Spark apps write in Kafka transactions: aborted records must stay unseen. With
    # read_committed the end is the last stable offset: an open transaction's records lie past it.
    consumer = KafkaConsumer(**client, enable_auto_commit=False, isolation_level="read_committed")
    try:
        found = consumer.partitions_for_topic(topic)
        if found is None and not missing_ok:
            raise LookupError(f"topic {topic} does not exist")
        wanted = set(found or []) if only is None else set(found or []) & set(only)
        partitions = [TopicPartition(topic, p) for p in sorted(wanted)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        return _read_until(consumer, consumer.end_offsets(partitions), timeout, topic)
    finally:
        consumer.close()


def _read_until(
    consumer: KafkaConsumer, ends: dict[TopicPartition, int], timeout: float, what: str
) -> list[Any]:
    """The assigned partitions' records from their positions up to `ends`, within `timeout`."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while any(consumer.position(tp) < ends[tp] for tp in ends):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not read to its end in {timeout:.0f}s")
        for batch in consumer.poll(timeout_ms=1000).values():
            records.extend(r for r in batch if r.offset < ends[TopicPartition(r.topic, r.partition)])
    return records


def read_partition(
    topic: str, partition: int, start: int, timeout: float = 60.0, **client: Any
) -> tuple[list[Any], int]:
    """The committed records of one partition of `topic` from offset `start` (from its first record
    when `start` lies before it) up to the end offset seen at the call's start, and that end: where
    a reader that holds what these records say goes on from next time."""
    consumer = KafkaConsumer(
        **client, enable_auto_commit=False, isolation_level="read_committed", auto_offset_reset="earliest"
    )
    try:
        if consumer.partitions_for_topic(topic) is None:
            raise LookupError(f"topic {topic} does not exist")
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek(tp, max(start, 0))
        return _read_until(consumer, {tp: end}, timeout, f"{topic}-{partition}"), end
    finally:
        consumer.close()
