"""daily_rollup: daily per-device statistics from sensor_aggregates' windows in Kafka.

Reads the aggregates topic (read_committed), pools the windows of the last --days dates (today
included) or of each --date, and writes one record per date x device x sensor x metric to the
compacted daily topic, keyed `device/sensor/metric/date`: a date rolled up again replaces its
records. The topic's earliest date is passed over once its retention has deleted records (its
first windows may be gone). Nothing is kept on any Pi's disk.
"""

from __future__ import annotations

import argparse
import datetime as dt

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from pikit_contract.brokers import bootstrap_servers
from pikit_spark.common import LOG, base_parser, kafka_options, kafka_python_client, session, setup_logging
from pikit_spark.rollup import as_daily_records, daily, dates_to_roll_up, windows_of
from pyspark.sql import functions as F

APP = "daily_rollup"
SEND_TIMEOUT_S = 120


def options() -> argparse.ArgumentParser:
    """The app's command line; those the spark role sets (spark_apps.daily_rollup.options) are
    required."""
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--aggregates-topic", required=True)
    parser.add_argument(
        "--daily-topic", required=True, help="compacted: one record per date x device x sensor x metric"
    )
    parser.add_argument("--days", type=int, required=True, help="roll up this many dates, today included")
    parser.add_argument(
        "--date", action="append", default=[], help="YYYY-MM-DD (repeatable): these dates instead"
    )
    return parser


def trimmed(topic: str, client: dict[str, object]) -> bool:
    """Whether the topic's retention (or a deletion) has removed records from its start."""
    consumer = KafkaConsumer(**client, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        return any(offset > 0 for offset in consumer.beginning_offsets(partitions).values())
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> None:
    args = options().parse_args(argv)
    setup_logging(args.log_level)
    client = kafka_python_client(args.kafka_properties)
    client["bootstrap_servers"] = bootstrap_servers(client)
    spark = session(APP, args.shuffle_partitions)
    records = (
        spark.read.format("kafka")
        .options(**kafka_options(args.kafka_properties))
        .option("subscribe", args.aggregates_topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    windows = windows_of(records).persist()
    present = [r.date for r in windows.select("date").distinct().collect()]
    today = dt.datetime.now(dt.UTC).date()
    dates, passed = dates_to_roll_up(
        present, today, args.days, trimmed(args.aggregates_topic, client), args.date
    )
    if passed:
        LOG.info(
            "%s: passed over %s, whose first windows the topic's retention may have deleted", APP, passed
        )
    table = daily(windows.where(F.col("date").isin(dates)))
    rows = [row.asDict() for row in table.collect()]
    producer = KafkaProducer(**client, acks="all", compression_type="gzip", linger_ms=20)
    try:
        futures = [
            producer.send(args.daily_topic, key=key, value=value) for key, value, _ in as_daily_records(rows)
        ]
        producer.flush(timeout=SEND_TIMEOUT_S)
        for future in futures:
            future.get(timeout=0)  # raises the send's error: the run fails and says so
    finally:
        producer.close(timeout=10)
    said = ", ".join(d.isoformat() for d in dates) or "none"
    LOG.info("%s: %d rows for dates %s written to %s", APP, len(rows), said, args.daily_topic)
    if rows:
        table.show(200, truncate=False)


if __name__ == "__main__":
    main()
