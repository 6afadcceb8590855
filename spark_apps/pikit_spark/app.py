"""What both streaming apps do around their micro-batches: logging, the session, the
exactly-once sink of their output topics, the one query, and how it ends."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pikit_contract.signing import Keyring
from pikit_contract.watchdog import Watchdog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

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
from pikit_spark.metrics import AppMetrics
from pikit_spark.progress import log_progress
from pikit_spark.sink import TransactionalSink

# How often a running app looks at its keyring file: a revoked device's forgeries are counted
# until its next look and batch (the brokers refuse the device itself first).
KEYRING_POLL_S = 5


@dataclass
class StreamingApp:
    name: str
    args: argparse.Namespace  # streaming_parser's options and the app's own
    spark: SparkSession
    sink: TransactionalSink  # every output topic, written once per micro-batch
    checkpoints: str
    keyring: KeyringFile | None  # the devices' signing keys and revocations; None: not checked
    metrics: AppMetrics  # served at --metrics-listen when given

    @classmethod
    def start(cls, name: str, args: argparse.Namespace, topics: list[str]) -> StreamingApp:
        setup_logging(args.log_level)
        # First, before the session: on a loaded Pi the JVM and the session take most of a minute
        # to start, longer than the watchdog waits for its first word.
        metrics = AppMetrics(name)
        watchdog = Watchdog.for_unit(metrics.last_sign, args.stall_after_seconds)
        if watchdog:
            watchdog.start()
        spark = session(name, args.shuffle_partitions)
        log_progress(spark)
        spark.streams.addListener(metrics)
        if args.metrics_listen:
            metrics.serve(args.metrics_listen)
        client = kafka_python_client(args.kafka_properties)
        checkpoints = args.checkpoint_dir.rstrip("/")
        sink = TransactionalSink(
            topics, name, client, adopt_new_checkpoint=args.adopt_new_checkpoint, failpoints=checkpoints
        )
        return cls(name, args, spark, sink, checkpoints, keyring_file(args.device_keys), metrics)

    def readings(self) -> DataFrame:
        """The readings topic's records, as a stream."""
        kafka = kafka_options(self.args.kafka_properties)
        return read_topic(self.spark, kafka, self.args.readings_topic, self.args)

    def run(
        self, frame: Callable[[Keyring | None], DataFrame], process: BatchFunction, stream: str, what: str
    ) -> None:
        """Each micro-batch of `frame` (planned with the keyring) to `process` until the query
        ends; exit 1 when it failed. A changed keyring restarts the query, not the app: the next
        batch reads on from the checkpoint, judged by the new keyring."""
        keyring = self.keyring.read() if self.keyring else None
        checkpoint = f"{self.checkpoints}/{stream}"
        try:
            while True:
                query = start_batches(frame(keyring), process, checkpoint, self.name, self.args)
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
        """Wait for the query to end (None), or for a newer keyring between two micro-batches,
        then stop the query and return the keyring. A batch that a stop interrupts after all is
        replayed by the next query, and the sink writes each batch once."""
        while not query.awaitTermination(KEYRING_POLL_S):
            if self.keyring and self.keyring.changed() and not query.status["isTriggerActive"]:
                keyring = self.keyring.newer()
                if keyring is not None:
                    query.stop()
                    return keyring
        return None
