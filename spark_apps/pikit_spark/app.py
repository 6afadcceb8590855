"""What both streaming apps do around their micro-batches: logging, the session, the one query
and how it ends, and what makes a driver replaceable: each batch's outputs, state changes and
source offsets committed in one Kafka transaction, and a start that resumes from them alone."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka import TopicPartition
from pikit_contract.brokers import bootstrap_servers
from pikit_contract.names import spark_batches_topic, spark_state_topic
from pikit_contract.signing import Keyring
from pikit_contract.watchdog import Watchdog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from pikit_spark.batches import driver_host, ensure_internal_topics, readings_partitions
from pikit_spark.changelog import KafkaState
from pikit_spark.common import (
    LOG,
    BatchFunction,
    KeyringFile,
    kafka_options,
    kafka_python_client,
    keyring_file,
    read_topic,
    session,
    setup_logging,
    start_batches,
)
from pikit_spark.leadership import Leadership
from pikit_spark.metrics import AppMetrics
from pikit_spark.partition_fold import Folded, Folder, IdlePartitions, PartitionBatch, Writer
from pikit_spark.partition_sink import Slice, fence
from pikit_spark.progress import log_progress
from pikit_spark.sink import TransactionalSink, batch_end_offsets, batch_timestamp, starting_offsets
from pikit_spark.standalone_master import settle_with_master

# How often a running app looks at its keyring file: a revoked device's forgeries are counted
# until its next look and batch (the brokers refuse the device itself first).
KEYRING_POLL_S = 5
# How long a changed keyring waits for a moment between two micro-batches before the query is
# stopped mid-batch: playbooks/edge-revoke.yml waits for every app to hold the new keyring.
KEYRING_WAIT_S = 15


@dataclass
class StreamingApp:
    name: str
    instance: str  # the app's name in Kafka (--instance): transactional id, group, internal topics
    args: argparse.Namespace  # streaming_parser's options and the app's own
    spark: SparkSession
    sink: TransactionalSink  # the app's own writer: its retries, its group's offsets, its fence
    state: KafkaState  # the state topic (each partition's task reads its own)
    checkpoints: str  # a scratch directory on the driver's own disk
    query_dir: str  # the query's Spark checkpoint, in it
    starting: str  # where the query starts: the offsets the app committed last
    keyring: KeyringFile | None  # the devices' signing keys and revocations; None: not checked
    metrics: AppMetrics  # served at --metrics-listen when given
    outputs: tuple[str, ...] = ()  # the app's output topics
    # kafka-python's options, from --kafka-properties (the same paths on every Spark node)
    client: dict[str, Any] = field(default_factory=dict)
    # The readings offsets the app's group held at the start (-1: none)
    resumed: dict[TopicPartition, int] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        name: str,
        args: argparse.Namespace,
        outputs: list[str],
        schemas: dict[str, str],
        stream: str,
    ) -> StreamingApp:
        """The app, resumed from what Kafka holds: the source offsets its partitions committed last.
        Anything an earlier driver left on any disk is neither needed nor read, and Spark's
        checkpoint starts empty. The state is not read here: each readings partition's task reads
        its own (pikit_spark/partition_fold.py). Every earlier writer is fenced first, so that an
        earlier driver's task still in flight fails at once."""
        setup_logging(args.log_level)
        # First, before the session: on a loaded Pi the JVM and the session take most of a minute
        # to start, longer than the watchdog waits for its first word.
        metrics = AppMetrics(name)
        watchdog = Watchdog.for_unit(metrics.last_sign, args.stall_after_seconds)
        if watchdog:
            watchdog.start()
        # A standby serves its page too (pikit_app_active 0): the same target whichever Pi is active.
        if args.metrics_listen:
            metrics.serve(args.metrics_listen)
        instance = args.instance or name
        client = kafka_python_client(args.kafka_properties)
        checkpoints = args.checkpoint_dir.rstrip("/")
        state_topic, batches_topic = spark_state_topic(instance), spark_batches_topic(instance)
        sink = TransactionalSink(
            [*outputs, state_topic, batches_topic], instance, client, failpoints=checkpoints
        )

        def reachable() -> dict[str, Any]:
            # Not a hung broker: each new client would spend its handshake's bound on it first.
            return {**client, "bootstrap_servers": bootstrap_servers(client)}

        def topics() -> list[int]:
            reached = reachable()
            found = readings_partitions(args.readings_topic, reached)
            ensure_internal_topics(instance, len(found), reached)
            return found

        partitions = sink.with_retries("the app's topics", topics)
        if args.driver_rank is not None:
            leadership = sink.with_retries(
                "joining the app's election",
                lambda: Leadership(instance, args.driver_rank, driver_host(), reachable()),
            )
            leadership.wait(alive=metrics.standing_by)
            leadership.keep()  # exits the driver when another one takes the app over
            sink.confirm = leadership.confirmed
        metrics.set("active", 1)

        def resume() -> tuple[dict[TopicPartition, int], KafkaState]:
            # The app's own transactional id (a driver of a release that wrote from the driver) and
            # each partition's: what is committed now stays so.
            sink.producer()
            fence(instance, partitions, reachable())
            committed = sink.committed_source([TopicPartition(args.readings_topic, p) for p in partitions])
            return committed, KafkaState(state_topic, schemas, reachable())

        # Retried as a batch's write is: a driver started while the brokers are away waits for them.
        committed, state = sink.with_retries("resuming from Kafka", resume)
        starting = starting_offsets(args.readings_topic, partitions, committed, args.starting_offsets)
        query_dir = f"{checkpoints}/{stream}"
        shutil.rmtree(query_dir, ignore_errors=True)
        reading = f"reading {args.readings_topic} from {starting}"
        LOG.info("%s: the state in its partitions' tasks from %s; %s", instance, state_topic, reading)
        # Named for its Kafka identity: the master tells one copy of an app from another by it.
        spark = session(instance, args.shuffle_partitions)
        settle_with_master(spark, instance)
        log_progress(spark)
        spark.streams.addListener(metrics)
        return cls(
            name,
            instance,
            args,
            spark,
            sink,
            state,
            checkpoints,
            query_dir,
            starting,
            keyring_file(args.device_keys),
            metrics,
            tuple(outputs),
            client,
            committed,
        )

    @property
    def readings_partitions(self) -> int:
        """The readings topic's count of partitions at the start: a device's records belong in
        the one its agent's producer keys them to (signing.home_partition), judged by this count."""
        return len(self.resumed)

    def readings(self) -> DataFrame:
        """The readings topic's records, as a stream."""
        kafka = kafka_options(self.args.kafka_properties)
        return read_topic(self.spark, kafka, self.args.readings_topic, self.args, self.starting)

    def partition_batch(self, batch_id: int, folder: Folder) -> PartitionBatch:
        """The micro-batch as the tasks of its readings partitions fold it: each partition's slice,
        from the previous batch's end (the offsets the app resumed from, for the query's first) to
        this one's, from Spark's offset log."""
        ends = self._read_to(batch_id)
        before = batch_id - 1
        starts = self._read_to(before) if (Path(self.query_dir) / "offsets" / str(before)).exists() else {}
        slices = {
            tp.partition: Slice(tp, starts.get(tp, self.resumed.get(tp, -1)), end) for tp, end in ends.items()
        }
        log = spark_batches_topic(self.instance)
        writer = Writer(
            self.instance,
            (*self.outputs, log),
            self.state.topic,
            self.state.schemas,
            self.client,
            {"failpoints": self.checkpoints},
        )
        at = batch_timestamp(self.query_dir, batch_id)
        return PartitionBatch(batch_id, at, slices, writer, folder, log, driver_host())

    def folded(self, folded: list[Folded], idle: IdlePartitions, batch: PartitionBatch) -> list[Folded]:
        """A partition batch's folds (partition_fold.fold_batch's) counted in the app's metrics."""
        written = [f for f in folded if f.written is not None]
        for name in batch.folder.counted:
            self.metrics.add(name, sum(f.counts.get(name, 0) for f in written))
        state_rows = idle.state_rows(batch.slices)
        if state_rows is not None:
            self.metrics.set("state_rows", state_rows)
        return folded

    def _read_to(self, batch_id: int) -> dict[TopicPartition, int]:
        """Where the batch stops reading each readings partition."""
        return {
            tp: offset
            for tp, offset in batch_end_offsets(self.query_dir, batch_id).items()
            if tp.topic == self.args.readings_topic
        }

    def run(self, frame: Callable[[Keyring | None], DataFrame], process: BatchFunction, what: str) -> None:
        """Each micro-batch of `frame` (planned with the keyring) to `process` until the query
        ends; exit 1 when it failed. A changed keyring restarts the query, not the app: the next
        batch reads on from the scratch checkpoint, judged by the new keyring."""
        keyring = self.keyring.read() if self.keyring else None
        try:
            while True:
                query = start_batches(frame(keyring), process, self.query_dir, self.name, self.args)
                if self.keyring and keyring is not None:
                    self.metrics.keyring(self.keyring.sha1, sorted(keyring.revoked))
                LOG.info("%s: %s", self.name, what)
                keyring = self._until_a_newer_keyring(query)
                if keyring is None:
                    break
                LOG.info("%s: the keyring changed; the query starts again with it", self.name)
        finally:
            self.sink.close()
        if query.exception() is not None:
            LOG.error("%s failed: %s", query.name, query.exception())
            sys.exit(1)

    def _until_a_newer_keyring(self, query: StreamingQuery) -> Keyring | None:
        """Wait for the query to end (None), or for a newer keyring, then stop the query and return
        the keyring. The stop waits for a moment between two micro-batches, for KEYRING_WAIT_S at
        most: a query that has fallen behind has no such moment, and is stopped mid-batch. That
        batch is computed again by the next query from the last committed state, and written once."""
        seen: float | None = None  # when the change was first seen
        while not query.awaitTermination(KEYRING_POLL_S):
            if not (self.keyring and self.keyring.changed()):
                seen = None
                continue
            seen = seen or time.monotonic()
            if query.status["isTriggerActive"] and time.monotonic() - seen < KEYRING_WAIT_S:
                continue
            keyring = self.keyring.newer()
            if keyring is not None:
                query.stop()
                return keyring
        return None
