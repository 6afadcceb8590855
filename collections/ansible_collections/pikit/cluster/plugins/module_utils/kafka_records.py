"""Records deleted on purpose: a topic's records before an offset or a time (a flood of bad
readings, a firmware bug's hour of garbage). Kafka moves each partition's log start offset; the
records before it are gone for good, and consumers (the Spark apps: failOnDataLoss false) go on
from the new start."""

from __future__ import annotations

import contextlib
from typing import Any

from ansible_collections.pikit.cluster.plugins.module_utils.kafka_client import client_options, connect
from ansible_collections.pikit.cluster.plugins.module_utils.kafka_topics import topic_partitions

# Without kafka-python the module fails, naming it (modules/kafka_admin.py: HAS_KAFKA).
with contextlib.suppress(ImportError):
    from kafka import KafkaConsumer, TopicPartition


def cut_offsets(
    starts: dict[int, int], ends: dict[int, int], before_offset: int, by_time: dict[int, int | None] | None
) -> dict[int, int]:
    """Per partition, the new log start: `before_offset`, or the first offset at or after the time
    (`by_time`, the partition's end where every record is older), never past the end; only the
    partitions whose start it moves."""
    cut = {}
    for partition, end in ends.items():
        if by_time is not None:
            found = by_time.get(partition)
            target = end if found is None else found
        else:
            target = before_offset
        target = min(target, end)
        if target > starts[partition]:
            cut[partition] = target
    return cut


def delete_records(params: dict[str, Any], check: bool) -> dict[str, Any]:
    """`params`: topic, and before_offset (>= 0) or before_time_ms (>= 0), one of them."""
    topic = params["topic"]
    if (params["before_offset"] >= 0) == (params["before_time_ms"] >= 0):
        raise ValueError("delete_records needs one of before_offset and before_time_ms")
    consumer = KafkaConsumer(**client_options(params))
    try:
        partitions = topic_partitions(consumer, topic)
        starts = {tp.partition: o for tp, o in consumer.beginning_offsets(partitions).items()}
        ends = {tp.partition: o for tp, o in consumer.end_offsets(partitions).items()}
        by_time = None
        if params["before_time_ms"] >= 0:
            found = consumer.offsets_for_times({tp: params["before_time_ms"] for tp in partitions})
            by_time = {tp.partition: (f.offset if f is not None else None) for tp, f in found.items()}
    finally:
        consumer.close()
    cut = cut_offsets(starts, ends, params["before_offset"], by_time)
    if cut and not check:
        admin = connect(params)
        try:
            admin.delete_records({TopicPartition(topic, p): o for p, o in cut.items()}, timeout_ms=30000)
        finally:
            admin.close()
    return {
        "changed": bool(cut),
        "changes": [
            f"{topic}[{p}]: records {starts[p]}..{o - 1} deleted ({o - starts[p]})"
            for p, o in sorted(cut.items())
        ],
        "deleted": sum(o - starts[p] for p, o in cut.items()),
    }
