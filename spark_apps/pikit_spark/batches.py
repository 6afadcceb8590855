"""What a streaming app keeps in Kafka beside its outputs, so that a driver started on any Pi
carries on where the last one committed (docs/design/any-pi-dies.md):

- the state topic `pikit-spark-<app>-state` (compacted, one record per device, as many partitions
  as the readings topic: pikit_spark/changelog.py);
- the election topic `pikit-spark-<app>-leader` (one partition, never written), whose consumer group
  picks the app's active driver (pikit_spark/leadership.py);
- the batch log `pikit-spark-<app>-batches`: one record per readings partition that a micro-batch
  committed (each partition's task commits apart, pikit_spark/partition_fold.py; one that read
  nothing and wrote nothing logs nothing): the batch's id, its timestamp (what "now" meant to it),
  where it stopped reading the partition, and the driver that ran it. Written in the commit's
  transaction, it lists exactly the commits whose outputs and state changes count, in order,
  whichever drivers ran them: what an independent recompute replays.

The app creates them at its start, as Kafka Streams creates its internal topics: their names
follow from the app's, and their partitions from the readings topic's.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError
from pikit_contract.names import spark_batches_topic, spark_leader_topic, spark_state_topic

from pikit_spark.sink import Change

LOG = logging.getLogger("pikit.batches")

# Kafka's replication bar for the pipeline's own topics (roles/kafka: three replicas, at least two
# in sync), on a site of fewer brokers as many as there are.
REPLICAS = 3
# The batch log's records are kept this long: a recompute that replays them reads them first.
BATCH_LOG_RETENTION_MS = 14 * 24 * 3600 * 1000


@dataclass(frozen=True)
class CommittedBatch:
    """One committed micro-batch of an app: its id in the driver's query, its timestamp (s), each
    readings partition's end offset, and the driver's host."""

    app: str
    batch: int
    timestamp: float
    ends: dict[int, int]
    driver: str

    def record(self) -> Change:
        doc = {
            "app": self.app,
            "batch": self.batch,
            "timestamp": self.timestamp,
            "ends": {str(p): o for p, o in sorted(self.ends.items())},
            "driver": self.driver,
        }
        return self.app.encode(), json.dumps(doc, separators=(",", ":")).encode(), []

    @classmethod
    def parse(cls, value: bytes) -> CommittedBatch:
        doc = json.loads(value)
        ends = {int(p): int(o) for p, o in doc["ends"].items()}
        return cls(doc["app"], int(doc["batch"]), float(doc["timestamp"]), ends, doc["driver"])


def driver_host() -> str:
    return socket.gethostname()


def readings_partitions(topic: str, client: Mapping[str, Any]) -> list[int]:
    consumer = KafkaConsumer(**client, enable_auto_commit=False)
    try:
        found = consumer.partitions_for_topic(topic)
    finally:
        consumer.close()
    if not found:
        raise LookupError(f"topic {topic} does not exist or holds no partition")
    return sorted(found)


def ensure_internal_topics(app: str, partitions: int, client: Mapping[str, Any]) -> None:
    """The app's state topic, batch log and election topic (pikit_spark/leadership.py), created when
    missing (left as they are when present)."""
    admin = KafkaAdminClient(**client)
    try:
        brokers = len(admin.describe_cluster()["brokers"])
        replicas = max(1, min(REPLICAS, brokers))
        wanted = [
            NewTopic(
                spark_state_topic(app),
                partitions,
                replicas,
                topic_configs={"cleanup.policy": "compact"},
            ),
            NewTopic(
                spark_batches_topic(app),
                1,
                replicas,
                topic_configs={"cleanup.policy": "delete", "retention.ms": str(BATCH_LOG_RETENTION_MS)},
            ),
            NewTopic(spark_leader_topic(app), 1, replicas),
        ]
        existing = set(admin.list_topics())
        for topic in wanted:
            if topic.name in existing:
                continue
            try:
                admin.create_topics([topic])
                LOG.info(
                    "created %s (%d partitions, %d replicas)", topic.name, topic.num_partitions, replicas
                )
            except TopicAlreadyExistsError:
                pass  # another driver of the app made it first
    finally:
        admin.close()
