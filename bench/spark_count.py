"""The ceiling for bench/catchup.py: Spark reading the same records the same way, and only counting them.

Submitted on the lab by bench/catchup.py with sensor_aggregates' own spark-submit line;
it reads the topic through the apps' `read_topic` (same Kafka options, same
maxOffsetsPerTrigger), so what differs from sensor_aggregates is only the work per batch.
"""

from __future__ import annotations

from pikit_spark.common import (
    LOG,
    kafka_options,
    read_topic,
    session,
    setup_logging,
    start_batches,
    streaming_parser,
)
from pyspark.sql import DataFrame

APP = "bench_count"


def main() -> None:
    args = streaming_parser(__doc__.split("\n\n")[0], APP).parse_args()
    setup_logging(args.log_level)
    spark = session(APP, args.shuffle_partitions)
    records = read_topic(spark, kafka_options(args.kafka_properties), args.readings_topic, args)
    counted = [0]

    def count(batch: DataFrame, batch_id: int) -> None:
        counted[0] += batch.count()

    query = start_batches(records, count, f"{args.checkpoint_dir.rstrip('/')}/stream", APP, args)
    query.awaitTermination()
    LOG.info("%s: %d records counted", APP, counted[0])


if __name__ == "__main__":
    main()
