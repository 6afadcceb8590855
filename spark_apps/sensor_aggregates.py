"""sensor_aggregates: per-minute statistics of every device's readings, from Kafka to Kafka and Parquet.

Reads the readings topic over mTLS; sends records and readings that break the reading
contract to the dead-letter topic (original bytes, reason in a header) and keeps going;
drops readings resent by an agent (same device and seq) within the watermark; emits
count/min/max/mean/stddev per event-time window x device x sensor x metric to the
aggregates topic (keyed by device) and to Parquet partitioned by date. A restart resumes
from the checkpoints without counting a window twice.
"""

from __future__ import annotations

import sys

from pikit_spark.aggregates import as_kafka_records, deduplicated, window_stats
from pikit_spark.common import LOG, kafka_options, read_topic, session, setup_logging, streaming_parser
from pikit_spark.progress import log_progress
from pikit_spark.readings import dead_letter_records, parse

APP = "sensor_aggregates"


def main(argv: list[str] | None = None) -> None:
    parser = streaming_parser(__doc__.split("\n\n")[0], APP)
    parser.add_argument("--aggregates-topic", default="sensor-aggregates")
    parser.add_argument("--dead-letter-topic", default="sensor-dead-letter")
    parser.add_argument(
        "--output-dir", default="/srv/pikit/shared/output", help="Parquet aggregates go to <dir>/aggregates"
    )
    parser.add_argument("--window", default="1 minute", help="tumbling event-time window")
    args = parser.parse_args(argv)
    setup_logging(args.log_level)

    spark = session(APP, args.shuffle_partitions)
    log_progress(spark)
    kafka = kafka_options(args.kafka_properties)
    parsed = parse(read_topic(spark, kafka, args.readings_topic, args))
    stats = window_stats(deduplicated(parsed.readings, args.watermark), args.window)
    checkpoints = args.checkpoint_dir.rstrip("/")

    to_kafka = (
        as_kafka_records(stats)
        .writeStream.format("kafka").options(**kafka).option("topic", args.aggregates_topic)
        .option("checkpointLocation", f"{checkpoints}/aggregates-kafka")
        .outputMode("append").trigger(processingTime=args.trigger).queryName(f"{APP}-kafka")
        .start()
    )  # fmt: skip
    to_parquet = (
        stats.writeStream.format("parquet").option("path", f"{args.output_dir.rstrip('/')}/aggregates")
        .partitionBy("date")
        .option("checkpointLocation", f"{checkpoints}/aggregates-parquet")
        .outputMode("append").trigger(processingTime=args.trigger).queryName(f"{APP}-parquet")
        .start()
    )  # fmt: skip
    dead = (
        dead_letter_records(parsed.dead_letters)
        .writeStream.format("kafka").options(**kafka).option("topic", args.dead_letter_topic)
        .option("checkpointLocation", f"{checkpoints}/dead-letters")
        .trigger(processingTime=args.trigger).queryName(f"{APP}-dead-letters")
        .start()
    )  # fmt: skip
    LOG.info(
        "%s: %s -> %s, %s/aggregates, dead letters -> %s; window %s, watermark %s",
        APP, args.readings_topic, args.aggregates_topic, args.output_dir, args.dead_letter_topic,
        args.window, args.watermark,
    )  # fmt: skip
    spark.streams.awaitAnyTermination()
    for query in (to_kafka, to_parquet, dead):
        if query.exception() is not None:
            LOG.error("%s failed: %s", query.name, query.exception())
            sys.exit(1)


if __name__ == "__main__":
    main()
