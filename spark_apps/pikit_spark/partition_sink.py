"""One readings partition's share of a micro-batch, folded and committed by the Spark task that
read it (docs/design/any-pi-dies.md, "The shape of (a) that also adds capacity").

A partition's fold needs only its own devices' state: the agent keys each record by its device,
so a device's readings all lie in one partition, in order, and its state lies in the same
partition of the app's compacted state topic (pikit_spark/changelog.py). The task writes its
partition's outputs, state changes and source offset in one Kafka transaction of its own, with the
transactional id `pikit-spark-<app>-p<k>`; the offset goes to the app's group,
`pikit-spark-<app>`, where a driver started anywhere reads where to start.

What keeps a partition exact whatever restarts, retries or copies of a task run: a task folds the
slice [start, end) of partition k only when the group holds `start` for k (or nothing yet), read
after its producer fenced every earlier writer of k. When the group holds `end`, the slice was
committed before, and nothing is written; anything else means that another query of the app read k
elsewhere, and the task fails with SupersededError.

Between batches the Python worker keeps each partition's writer (`for_partition`): its producer
and the state of its last commit, stamped with that commit (the offset and a token written with it
as the group's metadata). The next task of k on the same worker reads nothing from Kafka before
its fold. A worker whose producer another worker fenced reads the group's offset again, and,
unless the stamp still matches, the commits since its own in partition k of the state topic (a
catch-up from where its state stood, not the whole partition).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import TopicPartition
from kafka.errors import ProducerFencedError
from kafka.structs import OffsetAndMetadata
from pikit_contract.names import SPARK_PREFIX

from pikit_spark.changelog import Document, catch_up, changes_between, documents, tables_of
from pikit_spark.progress import Steps
from pikit_spark.sink import BoundedProducer, Change, SupersededError, TransactionalSink
from pikit_spark.state import Tables

# The partition's state before the batch -> its records by output topic, and its state after.
Fold = Callable[[Tables], tuple[Mapping[str, Iterable[Change]], Tables]]
# The group's offset for a partition and the token written with it; (-1, "") before the first.
Stamp = tuple[int, str]
# A worker fenced by another more often than this in one batch is in a tug of war: give the
# batch up to Spark, which retries the task.
FENCED_ATTEMPTS = 3
# A state held longer than this is read whole again rather than caught up: a catch-up is exact
# while the state topic keeps its tombstones (delete.retention.ms, a day by default).
CATCH_UP_WITHIN_S = 3600.0


@dataclass(frozen=True)
class Slice:
    """What one batch read of one readings partition: from `start` up to `end`, the next batch's start."""

    readings: TopicPartition
    start: int
    end: int


@dataclass(frozen=True)
class _Held:
    stamp: Stamp  # the commit this state is the result of
    tables: Tables
    docs: dict[str, Document]
    read_to: int  # the state partition's offset through which `docs` hold every record
    at: float  # when it was read or committed (time.monotonic())


class PartitionSink:
    """The writer of one readings partition's batches: their outputs, the partition's state and
    its source offset, one transaction per batch."""

    def __init__(
        self,
        app: str,
        partition: int,
        outputs: list[str],
        state_topic: str,
        schemas: Mapping[str, str],
        client: dict[str, Any],
        **options: Any,
    ) -> None:
        self.partition = partition
        self.state_topic = state_topic
        self.schemas = dict(schemas)
        self.sink = TransactionalSink(
            [*outputs, state_topic],
            writer_name(app, partition),
            client,
            group=f"{SPARK_PREFIX}{app}",
            pinned={state_topic: partition},
            **options,
        )
        self._producer: BoundedProducer | None = None
        self._stamp: Stamp = (-1, "")  # the group's for this partition, as this producer knows it
        self._held: _Held | None = None
        self.state_reads = 0  # how often a fold found no state here, and read the partition whole
        self.catch_ups = 0  # how often it found an older one, and read only the commits since
        self.steps = Steps()  # where the last commit's time went: what a slow batch's log line names

    def commit(self, batch_id: int, part: Slice, fold: Fold) -> int | None:
        """The slice folded into the partition's state, and the outputs, the state's changes and
        `part.end` committed together: the number of records written, None when the group held
        `part.end` already (the slice was committed before)."""
        fenced = 0
        self.steps = Steps()
        while True:
            try:
                return self.sink.with_retries(
                    f"batch {batch_id} of partition {self.partition}", lambda: self._attempt(part, fold)
                )
            except ProducerFencedError:
                # Another worker took the partition since this one's last batch: start anew from
                # what the group holds now.
                self.steps.done("fenced")
                self.sink.close(timeout=0)
                fenced += 1
                if fenced == FENCED_ATTEMPTS:
                    raise

    def _attempt(self, part: Slice, fold: Fold) -> int | None:
        producer = self.sink.producer()
        fresh = producer is not self._producer
        if fresh:  # it fenced every other writer of the partition: what the group holds is final
            self.steps.done("fence")
            self._producer, self._stamp = producer, self._group_holds(part.readings)
            self.steps.done("group")
        held = self._stamp[0]
        if held == part.end and part.start < part.end:
            return None
        if held not in (-1, part.start):
            if not fresh:
                # Another worker may have fenced this producer and committed since: ask anew.
                self.sink.close(timeout=0)
                return self._attempt(part, fold)
            raise SupersededError(
                f"{self.sink.group} holds {held} for {part.readings.topic}-{part.readings.partition}, "
                f"and this batch reads it from {part.start}"
            )
        before = self._state(self._stamp)
        self.steps.done("state")
        outputs, after = fold({name: list(rows) for name, rows in before.tables.items()})
        after_docs = documents(after)
        records = [(topic, record) for topic, rows in outputs.items() for record in rows]
        records += [(self.state_topic, change) for change in changes_between(before.docs, after_docs)]
        self.steps.done("fold")
        if not records and part.start == part.end:
            return 0  # nothing read, nothing changed
        token = uuid.uuid4().hex
        offsets = {part.readings: OffsetAndMetadata(part.end, token, -1)}
        sent = self.sink.transact(producer, records, offsets)
        self.steps.done("commit")
        # The state held now reflects every record of its partition through this transaction's last:
        # the group held the commit it folded on when this producer fenced every other writer.
        pairs = zip(records, sent, strict=True)
        state_at = [meta.offset for (topic, _), meta in pairs if topic == self.state_topic]
        self._stamp = (part.end, token)
        read_to = max(state_at) + 1 if state_at else before.read_to
        self._held = _Held(self._stamp, after, after_docs, read_to, time.monotonic())
        return len(records)

    def _group_holds(self, readings: TopicPartition) -> Stamp:
        found = self.sink.committed([readings])[readings]
        if found is None or found.offset < 0:
            return (-1, "")
        return (found.offset, found.metadata or "")

    def _state(self, stamp: Stamp) -> _Held:
        """The partition's state as of the commit `stamp`: the one held, when it is that commit's;
        else the one held caught up with the commits since (another worker's), or read whole."""
        held = self._held
        if held is not None and held.stamp == stamp:
            return held
        if held is not None and time.monotonic() - held.at < CATCH_UP_WITHIN_S:
            since, docs = held.read_to, held.docs
            self.catch_ups += 1
        else:
            since, docs = 0, {}
            self.state_reads += 1
        docs, end = catch_up(self.state_topic, self.partition, since, docs, self.sink.answering())
        # documents() sorts each device's rows: the docs compare equal to the next batch's.
        tables = tables_of(docs, self.schemas)
        self._held = _Held(stamp, tables, documents(tables), end, time.monotonic())
        return self._held

    def close(self) -> None:
        self.sink.close()
        self._producer, self._held = None, None


def writer_name(app: str, partition: int) -> str:
    """The name of the app's writer of `partition`: its transactional id after SPARK_PREFIX."""
    return f"{app}-p{partition}"


def fence(app: str, partitions: Iterable[int], client: Mapping[str, Any], timeout: float = 30.0) -> None:
    """Every earlier writer of the app's partitions fenced, and their open transactions aborted: a
    task of an earlier driver still in flight fails at its next call instead of committing late
    (which the offset rule would make harmless, but slow to see)."""
    for k in partitions:
        transactional_id = SPARK_PREFIX + writer_name(app, k)
        producer = BoundedProducer(
            **{**client, "transactional_id": transactional_id, "max_block_ms": int(timeout * 1000)}
        )
        try:
            producer.init_transactions()
        finally:
            producer.close(timeout=0)


_WRITERS: dict[tuple[str, int], PartitionSink] = {}


def for_partition(app: str, partition: int, *args: Any, **options: Any) -> PartitionSink:
    """This Python worker's writer of the app's partition (PartitionSink's arguments), kept between
    its tasks (Spark reuses a worker for the next task) with its producer and the state of its last
    commit."""
    key = (app, partition)
    if key not in _WRITERS:
        _WRITERS[key] = PartitionSink(app, partition, *args, **options)
    return _WRITERS[key]
