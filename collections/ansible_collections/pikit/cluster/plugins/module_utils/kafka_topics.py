"""Topics: created, partitions raised, configs set, deleted when confirmed; and a topic's end
offsets."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from ansible_collections.pikit.cluster.plugins.module_utils.kafka_client import client_options

# Without kafka-python the module fails, naming it (modules/kafka_admin.py: HAS_KAFKA).
with contextlib.suppress(ImportError):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import (
        ConfigResource,
        ConfigResourceType,
        NewPartitions,
        NewTopic,
    )


class DeletionRefusedError(RuntimeError):
    """A topic marked `state: absent` exists and its deletion was not confirmed."""


def doomed_topics(topics: list[dict[str, Any]], existing: set[str], confirmed: frozenset[str]) -> list[str]:
    """The topics marked `state: absent` that exist, all of them confirmed; else DeletionRefusedError,
    naming those that are not, before anything changes: a deletion drops every record for good."""
    doomed = [t["name"] for t in topics if t.get("state") == "absent" and t["name"] in existing]
    refused = [name for name in doomed if name not in confirmed]
    if refused:
        extra = json.dumps({"kafka_topics_delete_confirmed": refused})
        raise DeletionRefusedError(
            f"kafka_topics marks {', '.join(refused)} state: absent, which deletes every record of it for "
            f"good, and its consumers fail. Nothing was changed. To delete, run again with -e '{extra}'."
        )
    return doomed


def reconcile_topics(
    admin: Any, topics: list[dict[str, Any]], check: bool, confirmed: frozenset[str] = frozenset()
) -> tuple[list[str], list[str]]:
    changes: list[str] = []
    drift: list[str] = []
    current = {t["name"]: t for t in admin.describe_topics() if not t.get("is_internal")}
    doomed = doomed_topics(topics, set(current), confirmed)
    to_create = []
    for topic in topics:
        if topic.get("state") == "absent":
            continue
        name = topic["name"]
        config = {k: str(v) for k, v in (topic.get("config") or {}).items()}
        if name not in current:
            changes.append(f"create topic {name}")
            to_create.append(
                NewTopic(
                    name, int(topic["partitions"]), int(topic["replication_factor"]), topic_configs=config
                )
            )
            continue
        partitions = current[name]["partitions"]
        have = len(partitions)
        rf = len(partitions[0]["replica_nodes"]) if partitions else 0
        if int(topic["partitions"]) > have and topic.get("fixed_partitions"):
            drift.append(
                f"{name}: {have} partitions, inventory asks {topic['partitions']} (fixed_partitions: its "
                "records are placed by key, and more partitions would move keys to other partitions)"
            )
        elif int(topic["partitions"]) > have:
            changes.append(f"raise {name} partitions {have} -> {topic['partitions']}")
            if not check:
                admin.create_partitions({name: NewPartitions(int(topic["partitions"]))})
        elif int(topic["partitions"]) < have:
            drift.append(f"{name}: {have} partitions, inventory asks {topic['partitions']} (cannot shrink)")
        if rf != int(topic["replication_factor"]):
            drift.append(
                f"{name}: replication factor {rf}, inventory asks {topic['replication_factor']} "
                "(change it with a partition reassignment)"
            )
        if config:
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
            actual = {k: v["value"] for k, v in described["topic"][name].items()}
            differing = {k: v for k, v in config.items() if actual.get(k) != v}
            if differing:
                changes.append(f"set {name} config {differing}")
                if not check:
                    admin.alter_configs(
                        [ConfigResource(ConfigResourceType.TOPIC, name, configs=differing)], incremental=True
                    )
    if to_create and not check:
        admin.create_topics(to_create)
    changes += [f"delete topic {name}" for name in doomed]
    if doomed and not check:
        admin.delete_topics(doomed)
    return changes, drift


def topic_partitions(consumer: Any, topic: str) -> list[Any]:
    """Every partition of `topic`, in order; a topic without any is an error that names it."""
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
    if not parts:
        raise RuntimeError(f"topic {topic} has no partitions (does it exist?)")
    return parts


def end_offsets(params: dict[str, Any]) -> dict[str, int]:
    consumer = KafkaConsumer(**client_options(params))
    try:
        parts = topic_partitions(consumer, params["topic"])
        return {str(tp.partition): offset for tp, offset in sorted(consumer.end_offsets(parts).items())}
    finally:
        consumer.close()
