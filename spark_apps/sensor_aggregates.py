"""sensor_aggregates: per-minute statistics of every device's readings, from Kafka to Kafka and Parquet.

Reads the readings topic over mTLS; sends records and readings that break the reading
contract to the dead-letter topic (original bytes, reason in a header) and keeps going;
drops readings resent by an agent (same device and seq) within the watermark; emits
count/min/max/mean/stddev per event-time window x device x sensor x metric to the
aggregates topic (keyed by device) and to Parquet partitioned by date. A restart resumes
from the checkpoints without counting a window twice, and both outputs are exactly-once
(pikit_spark/sink.py, aggregates.write_parquet).
"""

from __future__ import annotations

import sys

from pikit_spark.aggregates import as_kafka_records, deduplicated, window_stats, write_parquet
from pikit_spark.common import (
    LOG,
    kafka_options,
    kafka_python_client,
    read_topic,
    session,
    setup_logging,
    streaming_parser,
)
from pikit_spark.progress import log_progress
from pikit_spark.readings import dead_letter_records, parse
from pikit_spark.sink import TransactionalSink, checkpoint_query_id, records_of
from pyspark.sql import DataFrame

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
    client = kafka_python_client(args.kafka_properties)
    parsed = parse(
        read_topic(spark, kafka_options(args.kafka_properties), args.readings_topic, args),
        args.max_clock_skew_seconds,
    )
    stats = window_stats(deduplicated(parsed.readings, args.watermark), args.window)
    checkpoints = args.checkpoint_dir.rstrip("/")
    parquet = f"{args.output_dir.rstrip('/')}/aggregates"
    adopt = args.adopt_new_checkpoint
    aggregates = TransactionalSink(
        [args.aggregates_topic], f"{APP}-aggregates", client, adopt_new_checkpoint=adopt
    )
    dead_letters = TransactionalSink(
        [args.dead_letter_topic], f"{APP}-dead-letters", client, adopt_new_checkpoint=adopt
    )

    def emit_windows(batch: DataFrame, batch_id: int) -> None:
        aggregates.lineage = aggregates.lineage or checkpoint_query_id(f"{checkpoints}/windows")
        batch.persist()
        try:
            if not batch.isEmpty():
                # Parquet first: a crash before the Kafka commit replays the batch, which
                # overwrites its own Parquet directory and then writes Kafka.
                write_parquet(batch, parquet, batch_id)
                aggregates.write(batch_id, {args.aggregates_topic: records_of(as_kafka_records(batch))})
        finally:
            batch.unpersist()

    def emit_dead_letters(batch: DataFrame, batch_id: int) -> None:
        dead_letters.lineage = dead_letters.lineage or checkpoint_query_id(f"{checkpoints}/dead-letters")
        records = dead_letter_records(batch).persist()
        try:
            if not records.isEmpty():
                dead_letters.write(batch_id, {args.dead_letter_topic: records_of(records)})
        finally:
            records.unpersist()

    # Two queries, not three: the windows go to Kafka and Parquet from one foreachBatch.
    windows = (
        stats.writeStream.foreachBatch(emit_windows)
        .option("checkpointLocation", f"{checkpoints}/windows")
        .outputMode("append").trigger(processingTime=args.trigger).queryName(f"{APP}-windows")
        .start()
    )  # fmt: skip
    dead = (
        parsed.dead_letters.writeStream.foreachBatch(emit_dead_letters)
        .option("checkpointLocation", f"{checkpoints}/dead-letters")
        .trigger(processingTime=args.trigger).queryName(f"{APP}-dead-letters")
        .start()
    )  # fmt: skip
    LOG.info(
        "%s: %s -> %s, %s, dead letters -> %s; window %s, watermark %s",
        APP, args.readings_topic, args.aggregates_topic, parquet, args.dead_letter_topic,
        args.window, args.watermark,
    )  # fmt: skip
    try:
        spark.streams.awaitAnyTermination()
    finally:
        aggregates.close()
        dead_letters.close()
    for query in (windows, dead):
        if query.exception() is not None:
            LOG.error("%s failed: %s", query.name, query.exception())
            sys.exit(1)


if __name__ == "__main__":
    main()
