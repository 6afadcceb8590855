"""The reference jobs for bench/catchup.py: Spark reading the same records the same way, and
either only counting them (the ceiling) or computing plain windows from them (the peer).

Submitted on the lab by bench/catchup.py with sensor_aggregates' own spark-submit line;
it reads the topic through the apps' `read_topic` (same Kafka options, same
maxOffsetsPerTrigger), so what differs from sensor_aggregates is only the work per batch:

- count: each micro-batch counted;
- `--peer`: each micro-batch parsed with `from_json` and the typed schema, exploded, and
  folded into per-minute windows (count, mean, variance, min, max per device, sensor and
  metric), fetched to the driver: a parser that validates nothing, keeps no state and
  writes no output. bench/parse.py uses the same peer on cached records.
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
from pyspark.sql import functions as F

APP = "bench_count"
PEER_SCHEMA = (
    "schema long, device string, readings array<struct<seq: long, sensor: string, metric: string,"
    " value: double, unit: string, ts: double>>"
)


def windows(readings: DataFrame) -> DataFrame:
    return readings.groupBy(
        "device",
        "sensor",
        "metric",
        (F.floor(F.col("ts") / 60) * 60).alias("window_start"),
    ).agg(
        F.count(F.lit(1)).alias("n"),
        F.avg("value"),
        F.var_pop("value"),
        F.min("value"),
        F.max("value"),
    )


def peer_windows(records: DataFrame) -> DataFrame:
    env = records.select(F.from_json(F.col("value").cast("string"), PEER_SCHEMA).alias("e"))
    readings = env.select("e.device", F.explode("e.readings").alias("r")).select("device", "r.*")
    return windows(readings)


def main() -> None:
    parser = streaming_parser(__doc__.split("\n\n")[0], APP)
    parser.add_argument("--peer", action="store_true", help="plain windows instead of a count")
    args = parser.parse_args()
    setup_logging(args.log_level)
    spark = session(APP, args.shuffle_partitions)
    records = read_topic(spark, kafka_options(args.kafka_properties), args.readings_topic, args)
    counted = [0]

    def count(batch: DataFrame, batch_id: int) -> None:
        counted[0] += batch.count()

    def plain_windows(batch: DataFrame, batch_id: int) -> None:
        counted[0] += len(peer_windows(batch).collect())

    work = plain_windows if args.peer else count
    query = start_batches(records, work, f"{args.checkpoint_dir.rstrip('/')}/stream", APP, args)
    query.awaitTermination()
    LOG.info("%s: %d %s", APP, counted[0], "windows" if args.peer else "records counted")


if __name__ == "__main__":
    main()
