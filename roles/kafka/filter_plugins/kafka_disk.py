"""The disk guard's arithmetic: how many bytes each topic's partitions may keep on a broker.

An SD card fills, and a broker whose data directory is full stops. Kafka bounds a partition's log
by `retention.bytes` (per partition), deleting whole segments, oldest first; between two checks
(`log.retention.check.interval.ms`) and until the active segment rolls, a partition holds up to
`retention.bytes` + one segment more. So a broker stays within its budget when, over the
partitions it hosts, the sum of `retention.bytes + segment.bytes` is at most its budget.
"""

from __future__ import annotations

import math
from typing import Any

MIB = 1024 * 1024
# Kafka 4.0 and later refuse a smaller segment.bytes (KIP-1030).
MIN_SEGMENT_BYTES = MIB
# A partition keeps this many segments of history when its segment size is derived.
SEGMENTS_KEPT = 4


class DiskPlanError(ValueError):
    """The topics cannot fit the brokers' disks as configured."""


def _weight(topic: dict[str, Any]) -> float:
    return float(topic.get("disk_weight", 1))


def _replicas_per_broker(topic: dict[str, Any], brokers: int) -> int:
    """The most replicas of the topic one broker hosts when Kafka spreads them evenly."""
    return math.ceil(int(topic["partitions"]) * int(topic["replication_factor"]) / brokers)


def kafka_disk_plan(
    topics: list[dict[str, Any]],
    disk_bytes: dict[str, int],
    share: float,
    brokers: int,
    segment_bytes: int,
) -> dict[str, dict[str, str]]:
    """`retention.bytes` and `segment.bytes` for each topic whose config sets no `retention.bytes`.

    `disk_bytes` maps each broker to its data disk's size; the smallest decides, since a topic's
    config holds on every broker. Of that disk, `share` is the budget of all partitions on a
    broker. A topic that sets `retention.bytes` itself keeps it and is reserved first, with its
    segments; the rest of the budget goes to the other topics' partitions in proportion to each
    topic's `disk_weight` (default 1). A derived segment is at most `segment_bytes`, and small
    enough that a partition keeps SEGMENTS_KEPT of them. Raises DiskPlanError, naming the host,
    the topic and the variables, when a topic's part cannot hold two segments. A broker whose
    size is 0 is unknown (outside the play's --limit) and left out.
    """
    known = {host: int(size) for host, size in disk_bytes.items() if int(size) > 0}
    if not known:
        return {}
    host, smallest = min(known.items(), key=lambda item: (item[1], item[0]))
    budget = int(smallest * share)
    where = (
        f"on {host}, whose data disk holds {smallest:,} bytes of which kafka_disk_share={share} "
        f"gives the partitions {budget:,}"
    )
    fixed: list[dict[str, Any]] = []
    sized: list[dict[str, Any]] = []
    for topic in topics:
        config = topic.get("config") or {}
        (fixed if "retention.bytes" in config else sized).append(topic)
    reserved = 0
    for topic in fixed:
        config = topic["config"]
        if int(config["retention.bytes"]) < 0:
            raise DiskPlanError(
                f"kafka_topics: topic {topic['name']} sets retention.bytes={config['retention.bytes']} "
                f"(unbounded): no disk bound can hold it {where}"
            )
        per_partition = int(config["retention.bytes"]) + int(config.get("segment.bytes", segment_bytes))
        reserved += per_partition * _replicas_per_broker(topic, brokers)
    left = budget - reserved
    if left < 0 or (sized and left <= 0):
        names = ", ".join(t["name"] for t in fixed)
        raise DiskPlanError(
            f"kafka_topics: the retention.bytes set on {names} and their segments need {reserved:,} "
            f"bytes per broker, more than the budget {where}"
        )
    weights = sum(_weight(t) * _replicas_per_broker(t, brokers) for t in sized)
    plan: dict[str, dict[str, str]] = {}
    for topic in sized:
        config = topic.get("config") or {}
        per_partition = int(left * _weight(topic) / weights)
        if "segment.bytes" in config:
            segment = int(config["segment.bytes"])
        else:
            segment = min(int(segment_bytes), per_partition // SEGMENTS_KEPT // MIB * MIB)
        segment = max(segment, MIN_SEGMENT_BYTES)
        retention = per_partition - segment
        if retention < segment:
            raise DiskPlanError(
                f"kafka_topics: topic {topic['name']} gets {per_partition:,} bytes per partition, fewer than "
                f"two segments of {segment:,} bytes, {where}: raise kafka_disk_share, give the topic fewer "
                "partitions or a larger disk_weight, or use a larger disk"
            )
        plan[topic["name"]] = {"retention.bytes": str(retention), "segment.bytes": str(segment)}
    return plan


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kafka_disk_plan": kafka_disk_plan,
        }
