"""One micro-batch of sensor_aggregates, as the app at commit BEFORE does it and as it does
now, beside a plain peer, in one run on a local Spark.

The input is N contract records of 100 readings each (bench.parse's records: 20 devices,
a few sensors, one reading per second), cached in memory and counted before any timing.
Each contender runs everything the app does with a micro-batch except the Kafka
transaction: parse, the per-device state (read and written as Parquet), the closed
windows, late readings and dead letters fetched to the driver, and the Parquet copy of the
windows. Every round starts from an empty state, as the catch-up bench's fresh checkpoint
does. Contenders:

- plain peer: `from_json`, `explode`, per-minute windows to the `noop` sink (no validation,
  no state, no outputs): the ceiling;
- before (BEFORE): the parse persisted, `advance` over its readings (the batch deduplicated
  reading by reading, the new readings and the merged windows persisted), dead letters from
  the persisted parse, the batch timestamp from a Spark job;
- now: `advance` over the parse's verdicts, which folds the batch into its small summary in
  one read, the batch timestamp from the checkpoint's offset log.

Rounds alternate the contenders; the table prints readings/s per contender (median, min and
max over the rounds) and each median's ratio to the peer's. The driver's memory is the
lab's executor memory (512 MB by default), the machine's CPUs those of `taskset`.

    taskset -c 0,1 .venv/bin/python -m bench.batch [--records 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from pikit_spark import device_windows
from pikit_spark.aggregates import as_kafka_records, write_parquet
from pikit_spark.readings import dead_letter_records, parse
from pikit_spark.sink import records_by_topic
from pikit_spark.state import VersionedTables
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.history import module_at
from bench.parse import PER_RECORD, T0, cached_records, local_session, peer
from bench.rounds import alternate, print_table

BEFORE = "dd038ac"  # main before the one-pass summary


def before_batch(old: ModuleType, work: Path) -> Callable[[DataFrame], None]:
    """sensor_aggregates' process() at BEFORE, less the Kafka transaction."""

    def run(batch: DataFrame) -> None:
        state = VersionedTables(batch.sparkSession, str(work / "state-before"), old.STATE_SCHEMAS)
        parsed = parse(batch, 10**9).persist()
        try:
            first = batch.select(F.unix_timestamp("processed_at")).first()
            assert first is not None
            step = old.advance(parsed.readings, float(first[0]), state.before(0), old.Timing()).persist()
            closed, late = step.closed.persist(), step.late.persist()
            state.write(0, step.state)
            outputs = records_by_topic(
                {
                    "aggregates": as_kafka_records(closed),
                    "late": old.late_records(late),
                    "dead": dead_letter_records(parsed.dead_letters),
                }
            )
            assert outputs["aggregates"]
            write_parquet(closed, str(work / "parquet-before"), 0)
            closed.unpersist()
            late.unpersist()
            step.unpersist()
        finally:
            parsed.unpersist()

    return run


def now_batch(work: Path, processed_at: float) -> Callable[[DataFrame], None]:
    """sensor_aggregates' process() now, less the Kafka transaction."""
    timing = device_windows.Timing()

    def run(batch: DataFrame) -> None:
        state = VersionedTables(batch.sparkSession, str(work / "state-now"), device_windows.STATE_SCHEMAS)
        verdicts = parse(batch, 10**9).verdicts
        step = device_windows.advance(verdicts, processed_at, state.before(0), timing).persist()
        try:
            state.write(0, step.state)
            outputs = records_by_topic(
                {
                    "aggregates": as_kafka_records(step.closed),
                    "late": device_windows.late_records(step.late),
                    "dead": dead_letter_records(step.dead),
                }
            )
            assert outputs["aggregates"]
            write_parquet(step.closed, str(work / "parquet-now"), 0)
        finally:
            step.unpersist()

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
        old = module_at(BEFORE, "spark_apps/pikit_spark/device_windows.py", "device_windows_before", work)
        # A device's readings are one a second from T0; the batch is processed a minute after
        # the newest: each device's windows close but its last, on the device's own clock.
        processed_at = T0 + args.records * PER_RECORD // 20 + 60
        frame = cached_records(spark, args.records, processed_at)
        n = args.records * PER_RECORD
        contenders: dict[str, Callable[[DataFrame], None]] = {
            "plain peer: from_json + explode + windows": peer,
            f"before ({BEFORE}): one micro-batch": before_batch(old, work),
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
