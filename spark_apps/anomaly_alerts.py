"""anomaly_alerts: readings outside per-sensor thresholds, or more than k standard deviations
from their device's rolling baseline, go to the alerts topic (keyed by device); so does a device
that went silent (one alert) and came back (one more): pikit_spark/presence.py.

Thresholds are `--threshold sensor.metric=low:high` (repeatable, either bound optional).
The baselines, seq marks and presence are the app's state, kept in Kafka with each batch's
alerts (pikit_spark/app.py): a driver started on any Pi resumes from them.
"""

from __future__ import annotations

import argparse

from pikit_contract.signing import Keyring
from pikit_spark.anomalies import STATE_SCHEMAS, Rules, Threshold, as_kafka_records, judge
from pikit_spark.app import StreamingApp
from pikit_spark.common import streaming_parser
from pikit_spark.presence import presence
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

    # No watermark: every reading is judged whenever it arrives (a device draining its
    # spool after an outage is alerted on too); resends are dropped by the device's seq mark.
    def readings(keyring: Keyring | None) -> DataFrame:
        return parse(app.readings(), args.max_clock_skew_seconds, keyring, app.readings_partitions).readings

    def judge_batch(readings: DataFrame, batch_id: int) -> None:
        batch = app.open_batch(batch_id)
        if batch is None:
            return
        # One read of the batch: the alerts, the baseline and the seq marks come from its summary.
        before = app.state.before()
        judged = judge(readings, before, rules)
        silences, present = presence(
            judged.seen, batch.timestamp, before["presence"], args.silent_after_seconds
        )
        found = judged.alerts + silences
        if app.commit(
            batch, {args.alerts_topic: as_kafka_records(found)}, {**judged.state, "presence": present}
        ):
            app.metrics.add("alerts", len(found))
        app.metrics.devices(present, batch.timestamp)

    rules_said = f"{len(rules.thresholds)} thresholds, k={rules.k:.1f}"
    app.run(readings, judge_batch, f"{args.readings_topic} -> {args.alerts_topic}; {rules_said}")


if __name__ == "__main__":
    main()
