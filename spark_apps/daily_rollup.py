"""daily_rollup: daily per-device statistics from sensor_aggregates' Parquet windows.

Reads <output-dir>/aggregates, writes <output-dir>/daily (partitioned by date; the dates
it computes are replaced, others kept) and prints the table.
"""

from __future__ import annotations

import argparse
import sys

from pikit_spark.common import LOG, base_parser, session, setup_logging
from pikit_spark.rollup import daily
from pyspark.sql import functions as F

APP = "daily_rollup"


def options() -> argparse.ArgumentParser:
    """The app's command line; those the spark role sets (spark_apps.daily_rollup.options) are
    required."""
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", required=True)
    parser.add_argument(
        "--date", action="append", default=[], help="YYYY-MM-DD (repeatable; default: every date)"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = options().parse_args(argv)
    setup_logging(args.log_level)

    spark = session(APP, args.shuffle_partitions)
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    out = args.output_dir.rstrip("/")
    try:
        windows = spark.read.parquet(f"{out}/aggregates")
    except Exception as exc:  # Spark raises AnalysisException for a path with no data yet
        LOG.error("no aggregates under %s/aggregates yet (%s); run sensor_aggregates first", out, exc)
        sys.exit(2)
    if args.date:
        windows = windows.where(F.col("date").cast("string").isin(args.date))
    table = daily(windows).persist()
    rows = table.count()
    table.write.mode("overwrite").partitionBy("date").parquet(f"{out}/daily")
    LOG.info(
        "%s: %d rows for %d dates written to %s/daily",
        APP,
        rows,
        table.select("date").distinct().count(),
        out,
    )
    table.show(200, truncate=False)


if __name__ == "__main__":
    main()
