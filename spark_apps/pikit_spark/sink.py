"""Exactly-once Kafka output for a streaming query: one Kafka transaction per micro-batch.

Spark's own Kafka sink is at-least-once: a driver killed after a batch reached Kafka but
before Spark committed it writes that batch again when it comes back, and consumers see
its windows twice. Here each micro-batch goes out from the driver in one Kafka
transaction (all of its output topics at once) which also records the batch id as the
committed offset of a marker group (`pikit-spark-<name>`, partition 0 of the first
output topic). On a replay the marker already holds the id and the batch is skipped;
`init_transactions()` fences the killed driver's producer and aborts whatever it left
open. Consumers of these topics read with isolation.level=read_committed.

A new producer bootstraps only from brokers that answer (`pikit_contract.brokers.bootstrap_servers`):
kafka-python waits on a hung broker's TLS handshake without a bound. Every call that waits on a
broker has a bound (`call_timeout`): kafka-python's `send_offsets_to_transaction()` and `commit_transaction()`
wait without one, and a commit in flight when the transaction coordinator went away hung a
query for good (issue 31). Here they are `BoundedProducer`'s, which raise `KafkaTimeoutError`
at the bound. The attempt is then dropped with its producer; the next producer's
`init_transactions()` fences it and settles what it left open (committed or aborted), and the
marker read next says which: a batch whose commit did land is skipped, one whose commit did not
is sent again.

A batch is committed only when every one of its records was acknowledged: kafka-python's
`commit_transaction()` does not check the sends (records expired during a broker outage
would be lost behind a committed marker), so `write` flushes and checks each send first.
A failed attempt is aborted and the whole batch is sent again, with backoff, for up to
`retry_for` seconds; after that the error is raised and Spark replays the batch when the
app restarts.

The marker also carries the id of the streaming query (from its checkpoint). A new
checkpoint with an old marker means the checkpoint was deleted or replaced: its batch
ids start again at 0, and skipping them would lose output, while writing them would
repeat it. The sink refuses to guess and stops with `LineageError`, unless the operator
said `adopt_new_checkpoint` (the marker then follows the new query, and output already
written may be written again).

The streaming apps write with `source` (pikit_spark/app.py): the transaction commits the batch's
readings offsets to the group instead of a batch id, so a batch is written before when the group
holds its end offsets, whatever checkpoint or driver runs it, and the marker's lineage check does
not apply. The batch-id marker stays for a writer with no Kafka source.

The rows pass through the driver, so this is for outputs of modest size per batch:
window aggregates, alerts, dead letters, late readings.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError, ProducerFencedError
from kafka.structs import OffsetAndMetadata
from pikit_contract.brokers import bootstrap_servers
from pikit_contract.failpoints import SINK_AFTER_COMMIT, SINK_AFTER_SENDS, SINK_BEFORE_COMMIT, fire_if_armed
from pikit_contract.names import SPARK_PREFIX

LOG = logging.getLogger("pikit.sink")
T = TypeVar("T")

FLUSH_MARGIN_S = 5.0  # a flush waits for the records' delivery timeout and this much more
# How long one attempt waits for its records to be delivered. kafka-python's transactional producer
# does not look for a new coordinator or leader while its own is gone: after one broker was killed,
# it waited for that broker until the records expired, and at 120 s the batch committed 65 s after
# the broker was back (the long nemesis, seed 4285880697). A failed attempt starts a new producer,
# which finds the new ones; the batch's retries (retry_for) ride out a longer outage. At 30 s, an
# attempt begun while every broker restarted waited out the whole 30 s on partitions whose leaders
# were still being elected, and the batch committed 61 s after the brokers started (the long
# nemesis, seed 1985822280). A healthy cluster acknowledges a batch within a second.
DELIVERY_TIMEOUT_MS = 15_000
# The producer's batches, uncompressed. At kafka-python's 16 KiB a batch of 16,800 records queued
# many batches per partition, and every send to a partition with more than one queued woke the
# sender thread: a socket write per record and two threads taking turns at the GIL (bench/
# sink_send.py). Compressed, a batch stays well under the brokers' 1 MiB message.max.bytes even
# when its records do not compress (dead letters keep their bytes).
BATCH_BYTES = 256 * 1024

Header = tuple[str, bytes]
Record = tuple[bytes | None, bytes, list[Header]]
# A record or a tombstone (no value), which removes its key from a compacted topic.
Change = tuple[bytes | None, bytes | None, list[Header]]
# How far a batch read each source partition: the offset its next batch starts at.
SourceOffsets = Mapping[TopicPartition, int]


def fenced(exc: BaseException) -> bool:
    """Whether a failed call says that another producer with the transactional id fenced this one.
    kafka-python raises ProducerFencedError from the call that met the fence, and from a send after
    it a KafkaError that carries the fence as its cause ("Cannot perform send because at least one
    previous transactional or idempotent request has failed")."""
    return any(isinstance(found, ProducerFencedError) for found in (exc, *exc.args))


class LineageError(RuntimeError):
    """The marker was written by another streaming query than the one now running."""


class SupersededError(RuntimeError):
    """Another driver of the app committed batches since this one's last: its state is stale, and
    it must start again from what Kafka holds (or stand by: pikit_spark/leadership.py)."""


class FoldDeferred(Exception):  # noqa: N818 (a deferral, not an error)
    """A fold that cannot decide its batch from what it was given: the attempt ends, unretried,
    before anything is written (pikit_spark/partition_fold.py)."""


def batch_timestamp(checkpoint: str, batch_id: int) -> float:
    """The timestamp (s) Spark gave a micro-batch, from `<checkpoint>/offsets/<id>`: what
    current_timestamp() means inside that batch, on its first run and on a replay alike.
    Read from the file, it costs no Spark job."""
    lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
    return int(json.loads(lines[1])["batchTimestampMs"]) / 1000


def batch_end_offsets(checkpoint: str, batch_id: int) -> dict[TopicPartition, int]:
    """Where a micro-batch stops reading each Kafka partition (the next batch's start), from
    `<checkpoint>/offsets/<id>`: the offsets the sink commits with the batch's outputs."""
    lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
    return {
        TopicPartition(topic, int(partition)): int(offset)
        for source in lines[2:]
        for topic, partitions in json.loads(source).items()
        for partition, offset in partitions.items()
    }


def starting_offsets(
    topic: str, partitions: Iterable[int], committed: Mapping[TopicPartition, int], fresh: str = "earliest"
) -> str:
    """Spark's `startingOffsets` for a query that resumes at the sink's committed offsets: every
    partition named (one with no commit yet at `fresh`: -2, Spark's earliest, or -1, its latest)."""
    unset = -1 if fresh == "latest" else -2
    held = {p: committed.get(TopicPartition(topic, p), -1) for p in partitions}
    offsets = {str(p): offset if offset >= 0 else unset for p, offset in sorted(held.items())}
    return json.dumps({topic: offsets}, separators=(",", ":"))


class BoundedProducer(KafkaProducer):  # type: ignore[misc]
    """kafka-python's producer whose transactional calls wait `timeout` seconds at most.

    kafka-python 3.0 (pinned) bounds init_transactions() by max_block_ms and flush() by its
    argument, but waits on send_offsets_to_transaction() and commit_transaction() forever. These
    two do what kafka-python's do, on its transaction manager, and wait on the result with a
    bound. A call that times out leaves the transaction in an unknown state: drop the producer."""

    def _await(self, result: Any, call: str, timeout: float) -> None:
        self._sender.wakeup()
        if not result.wait(timeout_ms=timeout * 1000):
            raise KafkaTimeoutError(f"{call} not done in {timeout:.0f}s")

    def send_offsets_within(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], group: str, timeout: float
    ) -> None:
        result = self._transaction_manager.send_offsets_to_transaction(offsets, group)
        self._await(result, "send_offsets_to_transaction", timeout)

    def commit_within(self, timeout: float) -> None:
        self._await(self._transaction_manager.begin_commit(), "commit_transaction", timeout)


class TransactionalSink:
    """Writes each micro-batch of records to its topics once, whatever restarts happen."""

    def __init__(
        self,
        topics: list[str],
        name: str,
        client: dict[str, Any],
        *,
        lineage: str = "",
        adopt_new_checkpoint: bool = False,
        retry_for: float = 600.0,
        delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS,
        call_timeout: float = 30.0,
        failpoints: str | None = None,
        confirm: Callable[[], None] | None = None,
        group: str | None = None,
        pinned: Mapping[str, int] | None = None,
    ) -> None:
        self.topics = topics
        self.transactional_id = f"{SPARK_PREFIX}{name}"
        # The group the source offsets go to: the transactional id's by default; one readings
        # partition's writer (pikit_spark/partition_sink.py) commits to its app's.
        self.group = group or self.transactional_id
        self.pinned = dict(pinned or {})  # topic -> the one partition every record of it goes to
        self.client = client
        self.marker = TopicPartition(topics[0], 0)
        self.lineage = lineage
        self.adopt_new_checkpoint = adopt_new_checkpoint
        self.retry_for = retry_for
        self.delivery_timeout_ms = delivery_timeout_ms
        self.call_timeout = call_timeout
        self.failpoints = failpoints  # the directory a test arms the SINK_POINTS in
        self._producer: BoundedProducer | None = None
        # The bootstrap servers that answered when the producer started (all of them before).
        self._answering: list[str] = list(client["bootstrap_servers"])
        # The last batch id committed, read from the marker when the producer starts; this
        # producer is then the only writer (a rival is fenced), so it keeps count itself.
        self._last_batch = -1
        # The source offsets the group held when the producer started, then what it committed.
        self._source: dict[TopicPartition, int] | None = None
        # The source offsets of this process's last commit (at first, what the group held).
        self._mine: dict[TopicPartition, int] | None = None
        # Raises unless this driver may write now (the app's election); None: always may.
        self.confirm = confirm

    def producer(self) -> BoundedProducer:
        if self._producer is None:
            # Not a hung broker: kafka-python would wait on its TLS handshake for as long as it hangs.
            if self.confirm:  # before a new producer fences the others: this driver may be the stale one
                self.confirm()
            self._answering = bootstrap_servers(self.client)
            producer = BoundedProducer(**self.producer_options())
            try:
                # Fences an earlier driver with the same id and settles its open
                # transaction, so the marker read next is final.
                producer.init_transactions()
                self._last_batch = self._checked_marker()
            except BaseException:
                producer.close(timeout=0)
                raise
            self._producer = producer
            self._source = None
        return self._producer

    def producer_options(self) -> dict[str, Any]:
        """kafka-python's options for the transactional producer; the client's win."""
        return {
            "request_timeout_ms": min(30_000, self.delivery_timeout_ms // 2),
            **self.client,
            "bootstrap_servers": self._answering,
            "transactional_id": self.transactional_id,
            "acks": "all",
            "linger_ms": 20,
            "batch_size": BATCH_BYTES,
            "compression_type": "gzip",
            "delivery_timeout_ms": self.delivery_timeout_ms,
            "max_block_ms": int(self.call_timeout * 1000),
            # Longer than one attempt may take (its flush, then two bounded calls): at Kafka's 60 s
            # the coordinator aborted a transaction still waiting out two brokers' outage, fenced
            # the producer, and the app restarted. A killed driver's transaction does not wait for
            # it: the next producer's init_transactions() aborts it at once.
            "transaction_timeout_ms": int(self.attempt_bound() * 1000) + 10_000,
        }

    def attempt_bound(self) -> float:
        """The longest one attempt at a batch waits on Kafka, seconds: flush, offsets, commit."""
        return self.delivery_timeout_ms / 1000 + FLUSH_MARGIN_S + 2 * self.call_timeout

    def answering(self) -> dict[str, Any]:
        """The client's options with the servers that answered when the producer started: a new
        client that bootstraps from a Pi that is gone waits out its connection timeout first
        (30 s of a lost Pi's first batch on the lab)."""
        return {**self.client, "bootstrap_servers": self._answering}

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Any]:
        """What the sink's group holds for these partitions (OffsetAndMetadata, or None)."""
        consumer = KafkaConsumer(
            **self.answering(),
            group_id=self.group,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        timeout_ms = int(self.call_timeout * 1000)
        try:
            return {tp: consumer.committed(tp, metadata=True, timeout_ms=timeout_ms) for tp in partitions}
        finally:
            consumer.close()

    def marker_state(self) -> tuple[int, str]:
        """(last batch id committed, query id that committed it); (-1, "") before the first."""
        committed = self.committed([self.marker])[self.marker]
        if committed is None or committed.offset < 0:
            return -1, ""
        return committed.offset - 1, committed.metadata or ""

    def written_through(self) -> int:
        """The id of the last batch this sink committed, -1 before the first (read from Kafka)."""
        return self.marker_state()[0]

    def _checked_marker(self) -> int:
        last, lineage = self.marker_state()
        if last < 0 or not self.lineage or lineage in ("", self.lineage):
            return last
        if not self.adopt_new_checkpoint:
            raise LineageError(
                f"{self.group}: Kafka holds output of batches 0..{last} of query {lineage}, but the "
                f"checkpoint now belongs to query {self.lineage}: it was deleted or replaced. Restore "
                "the checkpoint, or restart with --adopt-new-checkpoint to write from batch 0 of the "
                "new query (output already in Kafka may then be written again)."
            )
        LOG.warning("%s: adopting query %s after %s (batch %d)", self.group, self.lineage, lineage, last)
        return -1

    def write(
        self, batch_id: int, outputs: Mapping[str, Iterable[Change]], source: SourceOffsets | None = None
    ) -> int | None:
        """Send the batch's records (by topic) in one transaction; None when written before.

        With `source`, the transaction commits those offsets of the source partitions to the
        sink's group, in place of the batch id: a batch is then written before when the group's
        committed offsets reach `source`, whatever checkpoint or driver runs it, and a driver
        started anywhere resumes from them (docs/design/any-pi-dies.md)."""
        records = [(topic, record) for topic, rows in outputs.items() for record in rows]
        return self.with_retries(f"batch {batch_id}", lambda: self._write_once(batch_id, records, source))

    def with_retries(self, what: str, attempt_once: Callable[[], T]) -> T:
        """`attempt_once()` until it succeeds, with backoff, for up to `retry_for` seconds: each failed
        attempt drops the producer, and the next starts a new one from the brokers that answer."""
        deadline = time.monotonic() + self.retry_for
        attempt = 0
        while True:
            try:
                return attempt_once()
            except (LineageError, ProducerFencedError, SupersededError, FoldDeferred):
                raise  # a newer driver owns the output, the operator must decide, or the fold reads more
            except Exception as exc:
                if fenced(exc):
                    raise ProducerFencedError() from exc
                attempt += 1
                # A fenced or broken producer cannot be trusted again: drop it, open
                # transaction and all. Not abort_transaction(): kafka-python waits for it
                # without a timeout, and the broker may be what failed. The next producer's
                # init_transactions() aborts what this one left open.
                self.close(timeout=0)
                if time.monotonic() >= deadline:
                    LOG.error("%s: not done after %d attempts: %s", what, attempt, exc)
                    raise
                # Capped low: the batch must go out within seconds of the brokers' return.
                delay = min(10.0, 2.0**attempt)
                LOG.warning(
                    "%s: attempt %d failed (%s: %s); again in %.0fs",
                    what,
                    attempt,
                    type(exc).__name__,
                    exc,
                    delay,
                )
                time.sleep(delay)

    def committed_source(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offsets the sink's group holds for these source partitions (-1: none yet)."""
        held = self.committed(partitions)
        return {tp: -1 if found is None else found.offset for tp, found in held.items()}

    def covers(self, source: SourceOffsets) -> bool:
        """Whether the sink's group already holds these source offsets: a batch that ends there was
        committed, by this driver or one before it (read once per producer, which fenced them).
        Retried as a write is: the brokers may be away."""

        def once() -> bool:
            self.producer()
            return self._written_before(-1, source)

        return self.with_retries("the committed offsets", once)

    def _written_before(self, batch_id: int, source: SourceOffsets | None) -> bool:
        if source is None:
            return batch_id <= self._last_batch
        if self._source is None:  # read once per producer: it fenced every other writer
            self._source = self.committed_source(source)
            self._check_not_superseded(source)
        return all(self._source.get(tp, -1) >= offset for tp, offset in source.items())

    def _check_not_superseded(self, source: SourceOffsets) -> None:
        """The group must hold what this process committed last, or the batch in hand (its commit
        landed though the call timed out): anything else another driver wrote."""
        assert self._source is not None
        held = {tp: self._source.get(tp, -1) for tp in source}
        if self._mine is None:
            self._mine = held
            return
        mine = {tp: self._mine.get(tp, -1) for tp in source}
        if held not in (mine, dict(source)):
            raise SupersededError(f"{self.group}: the group holds {held}, this driver committed {mine}")

    def _write_once(
        self, batch_id: int, records: list[tuple[str, Change]], source: SourceOffsets | None = None
    ) -> int | None:
        producer = self.producer()
        if self._written_before(batch_id, source):
            LOG.info("batch %d: written to %s before a restart; skipped", batch_id, ",".join(self.topics))
            return None
        marker = (
            {self.marker: OffsetAndMetadata(batch_id + 1, self.lineage, -1)}
            if source is None
            else {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in source.items()}
        )
        self.transact(producer, records, marker)
        self._last_batch = batch_id
        if source is not None:
            self._source = {**(self._source or {}), **source}
            self._mine = {**(self._mine or {}), **source}
        counts = {t: sum(1 for topic, _ in records if topic == t) for t in self.topics}
        LOG.info("batch %d: committed %s", batch_id, ", ".join(f"{n} to {t}" for t, n in counts.items()))
        return len(records)

    def transact(
        self,
        producer: BoundedProducer,
        records: list[tuple[str, Change]],
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> list[Any]:
        """One transaction: every record acknowledged, then the offsets to the group, then the
        commit; each record's metadata (its partition and offset), in order. Raises, the
        transaction left open for the next producer to abort, on any failure."""
        producer.begin_transaction()
        futures = [
            producer.send(topic, key=key, value=value, headers=headers, partition=self.pinned.get(topic))
            for topic, (key, value, headers) in records
        ]
        # Bounded: while the transaction coordinator is away, kafka-python neither sends nor
        # expires the records, and an unbounded flush would hang the query.
        producer.flush(timeout=self.delivery_timeout_ms / 1000 + FLUSH_MARGIN_S)
        # Each get raises its send's error: the batch must not commit.
        sent = [future.get(timeout=0) for future in futures]
        self._failpoint(SINK_AFTER_SENDS)
        producer.send_offsets_within(offsets, self.group, self.call_timeout)
        self._failpoint(SINK_BEFORE_COMMIT)  # also after the offsets: one moment in this client
        producer.commit_within(self.call_timeout)
        self._failpoint(SINK_AFTER_COMMIT)
        return sent

    def _failpoint(self, name: str) -> None:
        if self.failpoints:
            fire_if_armed(self.failpoints, name, process_group=True)

    def close(self, timeout: float = 10) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=timeout)
            except Exception as exc:
                LOG.debug("closing the producer: %s", exc)
            self._producer = None
