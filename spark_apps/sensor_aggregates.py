"""sensor_aggregates: per-minute statistics of every device's readings, from Kafka to Kafka.

One query reads the readings topic over mTLS and parses each micro-batch once. Records
and readings that break the reading contract (or are stamped too far in the future) go to
the dead-letter topic with their reason. Each device's windows close on the device's own
event time (pikit_spark/device_windows.py), so a device that drains its spool after an
outage gets every window exact while the others' windows close on time; resends are
dropped by the device's `seq` high-water mark; a reading for a window already closed goes
to the late-data topic with its reason. count/min/max/mean/stddev per window x device x
sensor x metric go to the aggregates topic (keyed by device); the newest window of each
device x sensor x metric also goes to the compacted latest topic. Each readings partition's share
of a micro-batch is folded by the Spark task that holds it, not by the driver
(pikit_spark/partition_fold.py): its windows, latest values, late readings, dead letters, state
changes and source offset are one Kafka transaction of its own, written once whatever restarts
happen, and a driver started on any Pi resumes from them (pikit_spark/app.py).
"""

from __future__ import annotations

import argparse

from pikit_contract.failpoints import AFTER_KAFKA_COMMIT, fire_if_armed
from pikit_contract.signing import Keyring
from pikit_spark.aggregates import as_kafka_records, as_latest_records
from pikit_spark.app import StreamingApp
from pikit_spark.common import LOG, streaming_parser
from pikit_spark.device_windows import STATE_SCHEMAS, Advance, Timing, late_records
from pikit_spark.metrics import LATEST_STATS
from pikit_spark.partition_fold import IdlePartitions, batch_line, fold_batch
from pikit_spark.progress import Steps
from pikit_spark.readings import dead_letter_records, parse
from pikit_spark.sink import Record
from pikit_spark.window_fold import WindowFolder
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

APP = "sensor_aggregates"


def options() -> argparse.ArgumentParser:
    """The app's command line; those the spark role sets (spark_apps.sensor_aggregates.options)
    are required."""
    parser = streaming_parser(__doc__.split("\n\n")[0], APP)
    parser.add_argument("--aggregates-topic", required=True)
    parser.add_argument("--dead-letter-topic", required=True)
    parser.add_argument("--late-topic", required=True, help="readings of windows already closed")
    parser.add_argument(
        "--latest-topic", required=True, help="compacted: the newest window of each device x sensor x metric"
    )
    parser.add_argument(
        "--latest-gauge",
        action="append",
        default=[],
        choices=sorted(LATEST_STATS),
        help="export this statistic of each series' newest closed window on the metrics page "
        "(repeatable; none by default: each is a series per device x sensor x metric)",
    )
    parser.add_argument(
        "--latest-gauge-device",
        action="append",
        default=[],
        help="export the latest gauges of this device only (repeatable; default: every device)",
    )
    parser.add_argument("--window-seconds", type=int, default=60, help="tumbling event-time window")
    parser.add_argument(
        "--device-slack-seconds",
        type=int,
        required=True,
        help="a device's window closes when the device's own readings are this far past its end",
    )
    parser.add_argument(
        "--late-horizon-seconds",
        type=int,
        required=True,
        help="how long the windows of a silent device wait for it (processing time)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = options().parse_args(argv)
    topics = [args.aggregates_topic, args.latest_topic, args.late_topic, args.dead_letter_topic]
    app = StreamingApp.start(APP, args, topics, STATE_SCHEMAS, "stream")
    app.metrics.export_latest(args.latest_gauge, args.latest_gauge_device)
    timing = Timing(args.window_seconds, args.device_slack_seconds, args.late_horizon_seconds)
    gauged = frozenset(args.latest_gauge_device) if args.latest_gauge else None

    # What a partition's task writes of its fold (Spark ships this function to the executors).
    def outputs(step: Advance) -> dict[str, list[Record]]:
        return {
            args.aggregates_topic: as_kafka_records(step.closed),
            args.latest_topic: as_latest_records(step.closed),
            args.late_topic: late_records(step.late),
            args.dead_letter_topic: dead_letter_records(step.dead),
        }

    # The batch's timestamp, which Spark keeps in its offset log: a replay judges alike. The
    # parse is a stateless part of the stream, planned once per query, not once per micro-batch.
    def verdicts(keyring: Keyring | None) -> DataFrame:
        stamped = app.readings().withColumn("processed_at", F.current_timestamp())
        return parse(stamped, args.max_clock_skew_seconds, keyring, app.readings_partitions).verdicts

    # What this driver's tasks committed of each partition: a partition that read nothing and has
    # nothing to close runs no task.
    idle = IdlePartitions()

    folder = WindowFolder(timing, outputs, gauged)

    def process(verdicts: DataFrame, batch_id: int) -> None:
        steps = Steps()
        # Each readings partition's share is folded into its state and committed by the task that
        # holds it (pikit_spark/partition_fold.py): the driver plans the batch and counts.
        batch = app.partition_batch(batch_id, folder)
        folded = app.folded(fold_batch(verdicts, batch, idle), idle, batch)
        steps.done("folded")
        app.metrics.latest_windows([window for f in folded if f.written is not None for window in f.told])
        fire_if_armed(app.checkpoints, AFTER_KAFKA_COMMIT, process_group=True)
        left_out = sorted(set(batch.slices) - {f.partition for f in folded})
        LOG.info("batch %d: %s; %s", batch_id, batch_line(folded, folder.counted, left_out), steps)

    late_dead = f"late -> {args.late_topic}, dead letters -> {args.dead_letter_topic}"
    timing_said = f"window {timing.window_s}s, device slack {timing.slack_s}s, horizon {timing.horizon_s}s"
    app.run(
        verdicts, process, f"{args.readings_topic} -> {args.aggregates_topic}, {late_dead}; {timing_said}"
    )


if __name__ == "__main__":
    main()
