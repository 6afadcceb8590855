"""anomaly_alerts: readings outside per-sensor thresholds, or more than k standard deviations
from their device's rolling baseline, go to the alerts topic (keyed by device); so does a device
that went silent (one alert) and came back (one more): pikit_spark/presence.py.

Thresholds are `--threshold sensor.metric=low:high` (repeatable, either bound optional).
The baselines, seq marks, excursions and presence are the state of each device's readings
partition: the Spark task that holds the partition judges its readings and commits its alerts,
state changes and source offset in one Kafka transaction of its own (pikit_spark/alert_fold.py,
pikit_spark/partition_fold.py), and a driver started on any Pi resumes from them.
"""

from __future__ import annotations

import argparse

from pikit_contract.signing import Keyring
from pikit_spark.alert_fold import AlertFolder
from pikit_spark.anomalies import STATE_SCHEMAS, Rules, Threshold
from pikit_spark.app import StreamingApp
from pikit_spark.common import LOG, streaming_parser
from pikit_spark.partition_fold import IdlePartitions, batch_line, fold_batch
from pikit_spark.progress import Steps
from pikit_spark.readings import parse
from pyspark.sql import DataFrame

APP = "anomaly_alerts"


def options() -> argparse.ArgumentParser:
    """The app's command line; those the spark role sets (spark_apps.anomaly_alerts.options) are
    required."""
    parser = streaming_parser(__doc__.split("\n\n")[0], APP)
    parser.add_argument("--alerts-topic", required=True)
    parser.add_argument(
        "--threshold", action="append", default=[], type=Threshold.parse, metavar="SENSOR.METRIC=LOW:HIGH"
    )
    parser.add_argument(
        "--silent-after-seconds",
        type=float,
        required=True,
        help="a device with no reading for this long (processing time) raises one alert, and one when back",
    )
    parser.add_argument(
        "-k", "--stddevs", type=float, default=4.0, help="deviation from the baseline that alerts"
    )
    parser.add_argument(
        "--min-samples", type=int, default=30, help="readings a baseline needs before it alerts"
    )
    parser.add_argument(
        "--baseline-readings", type=int, default=1000, help="how many readings the baseline remembers"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = options().parse_args(argv)
    rules = Rules(tuple(args.threshold), args.stddevs, args.min_samples, args.baseline_readings)
    app = StreamingApp.start(APP, args, [args.alerts_topic], STATE_SCHEMAS, "readings")
    folder = AlertFolder(rules, args.silent_after_seconds, args.alerts_topic)

    # No watermark: every reading is judged whenever it arrives (a device draining its
    # spool after an outage is alerted on too); resends are dropped by the device's seq mark.
    def verdicts(keyring: Keyring | None) -> DataFrame:
        return parse(app.readings(), args.max_clock_skew_seconds, keyring, app.readings_partitions).verdicts

    # A partition that read nothing runs no task until one of its devices may fall silent.
    idle = IdlePartitions()

    def judge_batch(verdicts: DataFrame, batch_id: int) -> None:
        steps = Steps()
        batch = app.partition_batch(batch_id, folder)
        folded = app.folded(fold_batch(verdicts, batch, idle), idle, batch)
        steps.done("folded")
        told = [row for f in folded if f.written is not None for row in f.told]
        app.metrics.devices(told, batch.processed_at)
        left_out = sorted(set(batch.slices) - {f.partition for f in folded})
        LOG.info("batch %d: %s; %s", batch_id, batch_line(folded, folder.counted, left_out), steps)

    rules_said = f"{len(rules.thresholds)} thresholds, k={rules.k:.1f}"
    app.run(verdicts, judge_batch, f"{args.readings_topic} -> {args.alerts_topic}; {rules_said}")


if __name__ == "__main__":
    main()
