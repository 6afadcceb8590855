"""One micro-batch of sensor_aggregates, as the app at commit BEFORE does it and as it does
now, beside a plain peer, in one run on a local Spark.

The input is N contract records of 100 readings each (bench.parse's records: 20 devices,
a few sensors, one reading per second), cached in memory and counted before any timing.
Each contender runs everything the app does with a micro-batch except the Kafka
transaction: parse, the per-device state read and written, the closed windows, late
readings and dead letters fetched to the driver, and the Parquet copy of the windows.
Every round starts from an empty state, as the catch-up bench's fresh checkpoint does.
Contenders:

- plain peer: `from_json`, `explode`, per-minute windows to the `noop` sink (no validation,
  no state, no outputs): the ceiling;
- before (BEFORE, its pikit_spark loaded from git): the batch read once into a small
  summary, kept in Spark (checkpointed), state, windows and outputs computed from it by
  Spark jobs, the state written as Parquet by Spark;
- now: the summary fetched to the driver in the job that reads the batch, state, windows
  and outputs computed there, the state's changes made into the records of its Kafka topic
  (the Parquet copy is gone: the windows are in Kafka only).

Rounds alternate the contenders; the table prints readings/s per contender (median, min and
max over the rounds) and each median's ratio to the peer's. The driver's memory is the
lab's executor memory (512 MB by default), the machine's CPUs those of `taskset`.

    taskset -c 0,1 .venv/bin/python -m bench.batch [--records 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from pikit_spark.aggregates import as_kafka_records
from pikit_spark.changelog import changes
from pikit_spark.device_windows import STATE_SCHEMAS, Timing, late_records
from pikit_spark.readings import dead_letter_records, parse
from pikit_spark.state import Tables
from pikit_testkit.driver_fold import advance
from pyspark.sql import DataFrame

from bench.history import package_at
from bench.parse import CONTRACT_BEFORE, PER_RECORD, T0, cached_records, local_session, peer
from bench.rounds import alternate, print_table

BEFORE = "26b2ecd"  # main before the summary was folded on the driver
OLD = "pikit_spark_before"


def before_batch(work: Path, processed_at: float) -> Callable[[DataFrame], None]:
    """sensor_aggregates' process() at BEFORE, less the Kafka transaction."""
    package_at(BEFORE, "spark_apps/pikit_spark", "pikit_spark", OLD, work, CONTRACT_BEFORE)
    windows, aggregates, readings, sink, state_module = (
        importlib.import_module(f"{OLD}.{name}")
        for name in ("device_windows", "aggregates", "readings", "sink", "state")
    )

    def run(batch: DataFrame) -> None:
        state = state_module.VersionedTables(
            batch.sparkSession, str(work / "state-before"), windows.STATE_SCHEMAS
        )
        verdicts = readings.parse(batch, 10**9).verdicts
        step = windows.advance(verdicts, processed_at, state.before(0), windows.Timing()).persist()
        try:
            state.write(0, step.state)
            outputs = sink.records_by_topic(
                {
                    "aggregates": aggregates.as_kafka_records(step.closed),
                    "late": windows.late_records(step.late),
                    "dead": readings.dead_letter_records(step.dead),
                }
            )
            assert outputs["aggregates"]
            aggregates.write_parquet(step.closed, str(work / "parquet-before"), 0)
        finally:
            step.unpersist()

    return run


def now_batch(work: Path, processed_at: float) -> Callable[[DataFrame], None]:
    """sensor_aggregates' process() now, less the Kafka transaction."""

    def run(batch: DataFrame) -> None:
        empty: Tables = {name: [] for name in STATE_SCHEMAS}
        step = advance(parse(batch, 10**9).verdicts, processed_at, empty, Timing())
        outputs = {
            "aggregates": as_kafka_records(step.closed),
            "late": late_records(step.late),
            "dead": dead_letter_records(step.dead),
            "state": changes(empty, step.state),
        }
        assert outputs["aggregates"]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory", default="512m", help="the driver's (the lab's executors have 512m)")
    args = parser.parse_args()
    spark = local_session("bench-batch", args.memory)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # A device's readings are one a second from T0; the batch is processed a minute after
        # the newest: each device's windows close but its last, on the device's own clock.
        processed_at = T0 + args.records * PER_RECORD // 20 + 60
        frame = cached_records(spark, args.records, processed_at)
        n = args.records * PER_RECORD
        contenders: dict[str, Callable[[DataFrame], None]] = {
            "plain peer: from_json + explode + windows": peer,
            f"before ({BEFORE}): one micro-batch": before_batch(work, processed_at),
            "now: one micro-batch": now_batch(work, processed_at),
        }
        rates = alternate(contenders, frame, args.rounds, n, warm=frame.limit(500))
        cpus = sorted(os.sched_getaffinity(0))
        print(
            f"{n:,} readings in {args.records:,} records x {args.rounds} rounds, local[2], "
            f"driver {args.memory}, CPUs {cpus}, Spark {spark.version}"
        )
        print_table(rates, "plain peer: from_json + explode + windows")
        spark.stop()


if __name__ == "__main__":
    main()
