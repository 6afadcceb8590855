"""sensor_aggregates: per-minute statistics of every device's readings, from Kafka to Kafka and Parquet.

One query reads the readings topic over mTLS and parses each micro-batch once. Records
and readings that break the reading contract (or are stamped too far in the future) go to
the dead-letter topic with their reason. Each device's windows close on the device's own
event time (pikit_spark/device_windows.py), so a device that drains its spool after an
outage gets every window exact while the others' windows close on time; resends are
dropped by the device's `seq` high-water mark; a reading for a window already closed goes
to the late-data topic with its reason. count/min/max/mean/stddev per window x device x
sensor x metric go to the aggregates topic (keyed by device) and to Parquet partitioned by
date; the newest window of each device x sensor x metric also goes to the compacted latest
topic. Windows, latest values, late readings and dead letters of a micro-batch are one Kafka
transaction, written once whatever restarts happen (pikit_spark/sink.py).
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

from pikit_contract.failpoints import AFTER_KAFKA_COMMIT, fire_if_armed
from pikit_contract.signing import Keyring
from pikit_spark.aggregates import (
    PARQUET_STATE_SCHEMAS,
    as_kafka_records,
    as_latest_records,
    parquet_copy,
    write_parquet,
)
from pikit_spark.app import StreamingApp
from pikit_spark.common import AVAILABLE_NOW, LOG, streaming_parser
from pikit_spark.device_windows import STATE_SCHEMAS, Timing, advance, late_records
from pikit_spark.metrics import LATEST_STATS
from pikit_spark.progress import Steps
from pikit_spark.readings import dead_letter_records, parse
from pikit_spark.sink import batch_timestamp, checkpoint_query_id
from pikit_spark.state import VersionedTables
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
    parser.add_argument("--output-dir", required=True, help="Parquet aggregates go to <dir>/aggregates")
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
    parser.add_argument(
        "--parquet-every-seconds",
        type=float,
        default=60,
        help="closed windows are copied to Parquet together this often (processing time), one Spark job "
        "instead of one per micro-batch; 0: every micro-batch (always so with --trigger available-now)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = options().parse_args(argv)
    parquet_every = 0 if args.trigger == AVAILABLE_NOW else args.parquet_every_seconds
    topics = [args.aggregates_topic, args.latest_topic, args.late_topic, args.dead_letter_topic]
    app = StreamingApp.start(APP, args, topics)
    app.metrics.export_latest(args.latest_gauge, args.latest_gauge_device)
    sink, checkpoints = app.sink, app.checkpoints
    timing = Timing(args.window_seconds, args.device_slack_seconds, args.late_horizon_seconds)
    parquet = f"{args.output_dir.rstrip('/')}/aggregates"
    state = VersionedTables(app.spark, f"{checkpoints}/device-state", STATE_SCHEMAS | PARQUET_STATE_SCHEMAS)

    # The batch's timestamp, which Spark keeps in its offset log: a replay judges alike. The
    # parse is a stateless part of the stream, planned once per query, not once per micro-batch.
    def verdicts(keyring: Keyring | None) -> DataFrame:
        stamped = app.readings().withColumn("processed_at", F.current_timestamp())
        return parse(stamped, args.max_clock_skew_seconds, keyring).verdicts

    def process(verdicts: DataFrame, batch_id: int) -> None:
        sink.lineage = sink.lineage or checkpoint_query_id(f"{checkpoints}/stream")
        steps = Steps()
        # One read of the batch into its summary, fetched to the driver: every output and the
        # next state are computed from it there, without another Spark job.
        processed_at = batch_timestamp(f"{checkpoints}/stream", batch_id)
        before = state.before(batch_id)
        step = advance(verdicts, processed_at, before, timing)
        copy = parquet_copy(before, step.closed, processed_at, parquet_every)
        steps.done("read and summarized")
        # The state first: a crash before the Kafka commit replays the batch, which reads the
        # same state version and replaces what this run wrote.
        after = step.state | copy.state
        state.write(batch_id, after)
        app.metrics.set("state_rows", sum(len(rows) for rows in after.values()))
        steps.done("state")
        outputs = {
            args.aggregates_topic: as_kafka_records(step.closed),
            args.latest_topic: as_latest_records(step.closed),
            args.late_topic: late_records(step.late),
            args.dead_letter_topic: dead_letter_records(step.dead),
        }
        # The Parquet copy and the Kafka transaction run side by side: a crash before this
        # function returns replays the batch, which writes both again (each replaces its own).
        with ThreadPoolExecutor(1) as background:
            copied = (
                background.submit(write_parquet, app.spark, copy.windows, parquet, batch_id)
                if copy.due
                else None
            )
            if any(outputs.values()):
                if sink.write(batch_id, outputs) is not None:  # None: written before a restart
                    app.metrics.add("windows_closed", len(step.closed))
                    app.metrics.add("late_readings", len(step.late))
                    app.metrics.add("dead_letters", len(step.dead))
                app.metrics.latest_windows(step.closed)  # in Kafka now, this run's or the one before
                steps.done("kafka")
                fire_if_armed(checkpoints, AFTER_KAFKA_COMMIT, process_group=True)
            if copied:
                copied.result()
                steps.done("parquet")
        LOG.info(
            "batch %d: %s; %s",
            batch_id,
            steps,
            ", ".join(f"{len(rows)} to {topic}" for topic, rows in outputs.items()),
        )

    late_dead = f"late -> {args.late_topic}, dead letters -> {args.dead_letter_topic}"
    outputs_said = f"{args.aggregates_topic}, {parquet}, {late_dead}"
    timing_said = (
        f"window {timing.window_s}s, device slack {timing.slack_s}s, horizon {timing.horizon_s}s, "
        f"Parquet every {parquet_every:g}s"
    )
    app.run(verdicts, process, "stream", f"{args.readings_topic} -> {outputs_said}; {timing_said}")


if __name__ == "__main__":
    main()
