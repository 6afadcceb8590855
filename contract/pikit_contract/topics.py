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
        ends = consumer.end_offsets(partitions)
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: not read to its end in {timeout:.0f}s")
            for batch in consumer.poll(timeout_ms=1000).values():
                records.extend(r for r in batch if r.offset < ends[TopicPartition(r.topic, r.partition)])
        return records
    finally:
        consumer.close()
