"""What both streaming apps do around their micro-batches: logging, the session, the
exactly-once sink of their output topics, the one query, and how it ends."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from edge_agent.watchdog import Watchdog
from pyspark.sql import DataFrame, SparkSession

from pikit_spark.common import (
    LOG,
    BatchFunction,
    device_keys,
    kafka_options,
    kafka_python_client,
    read_topic,
    session,
    setup_logging,
    start_batches,
)
from pikit_spark.metrics import AppMetrics
from pikit_spark.progress import log_progress
from pikit_spark.sink import TransactionalSink


@dataclass
class StreamingApp:
    name: str
    args: argparse.Namespace  # streaming_parser's options and the app's own
    spark: SparkSession
    sink: TransactionalSink  # every output topic, written once per micro-batch
    checkpoints: str
    keys: dict[str, bytes] | None  # the devices' signing keys; None: signatures not checked
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
        keys = device_keys(args.device_keys)
        return cls(name, args, spark, sink, checkpoints, keys, metrics)

    def readings(self) -> DataFrame:
        """The readings topic's records, as a stream."""
        kafka = kafka_options(self.args.kafka_properties)
        return read_topic(self.spark, kafka, self.args.readings_topic, self.args)

    def run(self, frame: DataFrame, process: BatchFunction, stream: str, what: str) -> None:
        """Each micro-batch of `frame` to `process` until the query ends; exit 1 when it failed."""
        query = start_batches(frame, process, f"{self.checkpoints}/{stream}", self.name, self.args)
        LOG.info("%s: %s", self.name, what)
        try:
            query.awaitTermination()
        finally:
            self.sink.close()
        if query.exception() is not None:
            LOG.error("%s failed: %s", query.name, query.exception())
            sys.exit(1)
