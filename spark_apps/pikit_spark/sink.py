"""Exactly-once Kafka output for a streaming query: one Kafka transaction per micro-batch.

Spark's own Kafka sink is at-least-once: a driver killed after a batch reached Kafka but
before Spark committed it writes that batch again when it comes back, and consumers see
its windows twice. Here each micro-batch goes out from the driver in one Kafka
transaction which also records the batch id as the committed offset of a marker group
(`pikit-spark-<name>`, partition 0 of the output topic). On a replay the marker already
holds the id and the batch is skipped; `init_transactions()` fences the killed driver's
producer and aborts whatever it left open. Consumers of these topics read with
isolation.level=read_committed.

The rows pass through the driver, so this is for outputs of modest size per batch:
window aggregates, alerts, dead letters.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from pyspark.sql import DataFrame

LOG = logging.getLogger("pikit.sink")

Header = tuple[str, bytes]
Record = tuple[bytes | None, bytes, list[Header]]


class TransactionalSink:
    """Writes each micro-batch of records to `topic` once, whatever restarts happen."""

    def __init__(self, topic: str, name: str, client: dict[str, Any]) -> None:
        self.topic = topic
        self.transactional_id = self.group = f"pikit-spark-{name}"
        self.client = client
        self.marker = TopicPartition(topic, 0)
        self._producer: KafkaProducer | None = None
        # The last batch id committed, read from the marker when the producer starts; this
        # producer is then the only writer (a rival is fenced), so it keeps count itself.
        self._last_batch = -1

    def producer(self) -> KafkaProducer:
        if self._producer is None:
            producer = KafkaProducer(
                **self.client,
                transactional_id=self.transactional_id,
                acks="all",
                linger_ms=20,
                compression_type="gzip",
            )
            # Fences an earlier driver with the same id and settles its open transaction,
            # so the marker read next is final.
            producer.init_transactions()
            self._last_batch = self.written_through()
            self._producer = producer
        return self._producer

    def written_through(self) -> int:
        """The id of the last batch this sink committed, -1 before the first (read from Kafka)."""
        consumer = KafkaConsumer(
            **self.client, group_id=self.group, enable_auto_commit=False, isolation_level="read_committed"
        )
        try:
            committed = consumer.committed(self.marker)
        finally:
            consumer.close()
        return -1 if committed is None else int(committed) - 1

    def write(self, batch_id: int, records: Iterable[Record]) -> int | None:
        """Send the batch's records in one transaction; None when the batch was written before."""
        producer = self.producer()
        if batch_id <= self._last_batch:
            LOG.info("batch %d: written to %s before a restart; skipped", batch_id, self.topic)
            return None
        producer.begin_transaction()
        try:
            sent = 0
            for key, value, headers in records:
                producer.send(self.topic, key=key, value=value, headers=headers)
                sent += 1
            marker = {self.marker: OffsetAndMetadata(batch_id + 1, "", -1)}
            producer.send_offsets_to_transaction(marker, self.group)
            producer.commit_transaction()
        except BaseException:
            self._abort()
            raise
        self._last_batch = batch_id
        LOG.info("batch %d: %d records to %s", batch_id, sent, self.topic)
        return sent

    def _abort(self) -> None:
        try:
            if self._producer is not None:
                self._producer.abort_transaction()
        except Exception:  # the original error is the one worth raising
            LOG.exception("%s: abort failed; a new producer will fence this one", self.topic)
            self.close()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=10)
            self._producer = None


def records_of(frame: DataFrame) -> Iterator[Record]:
    """The rows of a (key, value[, headers]) frame, fetched to the driver a partition at a time."""
    with_headers = "headers" in frame.columns
    for row in frame.toLocalIterator(prefetchPartitions=True):
        key = None if row["key"] is None else bytes(row["key"])
        headers = [(h["key"], bytes(h["value"])) for h in row["headers"]] if with_headers else []
        yield key, bytes(row["value"]), headers
