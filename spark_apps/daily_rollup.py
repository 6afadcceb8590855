"""daily_rollup: daily per-device statistics from sensor_aggregates' Parquet windows.

Reads <output-dir>/aggregates, writes <output-dir>/daily (partitioned by date; the dates
it computes are replaced, others kept) and prints the table. Then keeps the retention: the
windows of dates older than --retention-days are deleted once the daily table holds them
(pikit_spark/retention.py), and what went is reported.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from pikit_spark import retention
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
    parser.add_argument(
        "--retention-days",
        type=int,
        required=True,
        help="keep this many days of per-minute windows (today included) and delete older dates "
        "once rolled up; 0: keep every date",
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
    if args.retention_days > 0:
        # Read back, not taken from this run's table: a date rolled up by an earlier run counts.
        held = {str(r.date) for r in spark.read.parquet(f"{out}/daily").select("date").distinct().collect()}
        today = dt.datetime.now(dt.UTC).date()
        report = retention.apply(Path(f"{out}/aggregates"), args.retention_days, today, held)
        LOG.info("%s: %s", APP, report.summary(args.retention_days, Path(f"{out}/aggregates")))


if __name__ == "__main__":
    main()
