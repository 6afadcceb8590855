"""Replica placement: the moves that balance the brokers in service, made under a replication throttle."""

from __future__ import annotations

import contextlib
import time
from typing import Any

# Without kafka-python the module fails, naming it (modules/kafka_admin.py: HAS_KAFKA).
with contextlib.suppress(ImportError):
    from kafka import TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType


def balanced_assignment(
    current: dict[tuple[str, int], list[int]], serving: list[int]
) -> dict[tuple[str, int], list[int]]:
    """The partitions to move, each with its new replica list: every replica on a broker outside
    `serving` goes to the emptiest serving broker the partition lacks; then one replica at a time
    moves from the fullest broker to the emptiest, until their counts differ by at most one. A new
    replica takes the old one's place in the list, so preferred leaders move as little as replicas.
    Deterministic; a balanced cluster gives no move."""
    brokers = sorted(set(serving))
    target = {tp: list(replicas) for tp, replicas in current.items()}
    load = dict.fromkeys(brokers, 0)
    for replicas in target.values():
        for broker in replicas:
            if broker in load:
                load[broker] += 1
    for tp in sorted(target):
        replicas = target[tp]
        for i, broker in enumerate(replicas):
            if broker in load:
                continue
            free = [b for b in brokers if b not in replicas]
            if not free:
                raise ValueError(
                    f"{tp[0]}-{tp[1]} has {len(replicas)} replicas, "
                    f"more than the {len(brokers)} brokers in service"
                )
            replicas[i] = min(free, key=lambda b: (load[b], b))
            load[replicas[i]] += 1
    while brokers:
        fullest = max(brokers, key=lambda b: (load[b], -b))
        emptiest = min(brokers, key=lambda b: (load[b], b))
        if load[fullest] - load[emptiest] <= 1:
            break
        # Some partition on the fullest lacks the emptiest, or the emptiest would not be emptier.
        movable = [tp for tp in sorted(target) if fullest in target[tp] and emptiest not in target[tp]]
        tp = min(movable, key=lambda t: target[t][0] == fullest)  # a follower replica first
        target[tp] = [emptiest if b == fullest else b for b in target[tp]]
        load[fullest] -= 1
        load[emptiest] += 1
    return {tp: replicas for tp, replicas in target.items() if replicas != current[tp]}


BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def throttle(admin: Any, brokers: list[int], topics: list[str], rate: int | None) -> None:
    """Set the replication throttle on these brokers and topics, or (rate None) remove it."""

    def value(v: str) -> Any:
        return v if rate is not None else ("DELETE", "")

    resources = [
        ConfigResource(
            ConfigResourceType.BROKER, str(b), configs={k: value(str(rate)) for k in BROKER_THROTTLES}
        )
        for b in brokers
    ] + [
        ConfigResource(ConfigResourceType.TOPIC, t, configs={k: value("*") for k in TOPIC_THROTTLES})
        for t in topics
    ]
    admin.alter_configs(resources, incremental=True, raise_on_unknown=False)


def rebalance(
    admin: Any, serving: list[int], throttle_bytes: int, wait_timeout: int, check: bool
) -> dict[str, Any]:
    ongoing = admin.list_partition_reassignments()
    if ongoing:
        moving = sorted(f"{tp.topic}-{tp.partition}" for tp in ongoing)
        msg = f"partitions are still moving from an earlier reassignment, run again when done: {moving}"
        return {"changed": False, "failed": True, "msg": msg}
    current = {
        (t["name"], p["partition_index"]): list(p["replica_nodes"])
        for t in admin.describe_topics()
        for p in t["partitions"]
    }
    moves = balanced_assignment(current, serving)
    result: dict[str, Any] = {
        "changed": bool(moves),
        "moves": [f"{t}-{p}: {current[(t, p)]} -> {r}" for (t, p), r in sorted(moves.items())],
    }
    if not moves or check:
        return result
    brokers = sorted({b for replicas in current.values() for b in replicas} | set(serving))
    topics = sorted({t for t, _ in moves})
    if throttle_bytes > 0:
        throttle(admin, brokers, topics, throttle_bytes)
    try:
        wanted = {TopicPartition(t, p): r for (t, p), r in moves.items()}
        accepted = admin.alter_partition_reassignments(wanted)
        refused = {f"{tp.topic}-{tp.partition}": str(error) for tp, error in accepted.items() if error}
        if refused:
            result.update(failed=True, msg=f"partition moves refused: {refused}")
            return result
        deadline = time.monotonic() + wait_timeout
        while admin.list_partition_reassignments():
            if time.monotonic() >= deadline:
                result.update(
                    failed=True,
                    msg=f"partition moves not done within {wait_timeout}s; they go on, unthrottled from now",
                )
                return result
            time.sleep(2)
    finally:
        if throttle_bytes > 0:
            throttle(admin, brokers, topics, None)
    return result
