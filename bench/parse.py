"""Parsing and validating readings in Spark: a plain peer, the parser before the VARIANT
rework (git commit BEFORE) and today's, side by side in one run.

The input is N contract records of 100 readings each (20 devices, a few sensors, one
reading per second), cached in memory and counted before any timing, so that every
contender reads the same rows from the same place. Each contender then computes the same
per-minute windows (count, mean, variance, min, max per device, sensor and metric) and
writes them to Spark's `noop` sink; the time is that job's wall clock. Contenders:

- plain peer: `from_json` with the typed schema, `explode`, the windows; no validation,
  the ceiling of a parser that checks nothing;
- before / now, readings: `parse(...).readings`, the windows;
- now, signatures checked: the same with every record's MAC and signer checked against
  the devices' keys (pikit_contract/signing.py), as the deployed apps do;
- before / now, readings and dead letters: what `sensor_aggregates` does per micro-batch,
  the windows and the dead letters from one parse (today: `Parsed.persist`; before: its
  two queries, each parsing).

Rounds alternate the contenders, so the machine's noise falls on all of them; the table
prints readings/s per contender (median, min and max over the rounds) and each median's
ratio to the plain peer's. local[2]; run it under `taskset -c 0,1`, which the JVM that
pyspark starts (every thread of it) inherits.

    taskset -c 0,1 .venv/bin/python -m bench.parse [--records 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from pikit_contract import signing
from pikit_contract.readings import READINGS_TOPIC, Reading, encode_batch
from pikit_spark import readings as now
from pikit_spark.common import SESSION_SETTINGS
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.history import module_at
from bench.rounds import alternate, print_table
from bench.spark_count import peer_windows, windows

BEFORE = "ba5d312"  # main before issue 11's parser rework
# The reading contract lived in the agent's package then (pikit_contract now).
CONTRACT_BEFORE = {"edge_agent.contract": "edge_agent/edge_agent/contract.py"}
# The records' contract version: 1, which the "before" contenders read too (today's apps read 1 and
# 2). With version 2 the old parsers dead-lettered every record, and "before" timed that instead.
SCHEMA = 1
PER_RECORD = 100
T0 = 1_795_000_000
DEVICES = [f"edge-{d}" for d in range(20)]
KEYS = {device: signing.device_key(b"bench site", device) for device in DEVICES}
Headers = list[tuple[str, bytes]]


def records(n: int) -> list[tuple[bytes, bytes, Headers, str, int, int]]:
    """n contract records of PER_RECORD readings, devices and sensors interleaved, each signed
    by its device as the agent signs it."""
    out = []
    seq: dict[str, int] = {}
    for i in range(n):
        device = DEVICES[i % len(DEVICES)]
        first = seq.get(device, 0)
        seq[device] = first + PER_RECORD
        batch = [
            Reading(
                device,
                first + j,
                f"s{j % 3}",
                ("temperature", "humidity")[j % 2],
                20.0 + (j % 17) * 0.37,
                "C",
                T0 + first + j + 0.25,
            )
            for j in range(PER_RECORD)
        ]
        value = encode_batch(device, batch, schema=SCHEMA)
        headers = signing.headers(device, KEYS[device], value)
        out.append((device.encode(), value, headers, READINGS_TOPIC, i % 3, i))
    return out


def peer(frame: DataFrame) -> None:
    peer_windows(frame).write.format("noop").mode("overwrite").save()


def readings_only(module: object, **options: object) -> Callable[[DataFrame], None]:
    def run(frame: DataFrame) -> None:
        parsed = module.parse(frame, **options)  # type: ignore[attr-defined]
        windows(parsed.readings).write.format("noop").mode("overwrite").save()

    return run


def both(module: object) -> Callable[[DataFrame], None]:
    def run(frame: DataFrame) -> None:
        parsed = module.parse(frame)  # type: ignore[attr-defined]
        if hasattr(parsed, "persist"):
            parsed = parsed.persist()
        windows(parsed.readings).write.format("noop").mode("overwrite").save()
        parsed.dead_letters.write.format("noop").mode("overwrite").save()
        if hasattr(parsed, "unpersist"):
            parsed.unpersist()

    return run


def local_session(app: str, memory: str) -> SparkSession:
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", memory)
        .config("spark.sql.session.timeZone", str(SESSION_SETTINGS["spark.sql.session.timeZone"]))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cached_records(spark: SparkSession, n: int, processed_at: float | None = None) -> DataFrame:
    """`records(n)` as Kafka rows, cached and counted; with the batch's `processed_at` if given."""
    frame = spark.createDataFrame(
        records(n),
        "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
        "partition int, offset long",
    )
    if processed_at is not None:
        frame = frame.withColumn("processed_at", F.timestamp_seconds(F.lit(processed_at)))
    frame = frame.repartition(2).cache()
    assert frame.count() == n
    return frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spark = local_session("bench-parse", "1g")
    with tempfile.TemporaryDirectory() as tmp:
        before = module_at(
            BEFORE,
            "spark_apps/pikit_spark/readings.py",
            "readings_before",
            Path(tmp),
            dependencies=CONTRACT_BEFORE,
        )
    frame = cached_records(spark, args.records)
    n = args.records * PER_RECORD
    # The signed contender must time the path of good records, not of dead letters.
    assert now.parse(frame, keys=KEYS).readings.count() == n, "a signed record was refused"
    assert before.parse(frame).readings.count() == n, "the before contender refused a record"
    contenders: dict[str, Callable[[DataFrame], None]] = {
        "plain peer: from_json + explode + windows": peer,
        f"before ({BEFORE}): parse().readings + windows": readings_only(before),
        "now: parse().readings + windows": readings_only(now),
        "now, signatures checked: parse(keys).readings + windows": readings_only(now, keys=KEYS),
        f"before ({BEFORE}): readings + dead letters": both(before),
        "now: readings + dead letters": both(now),
    }
    rates = alternate(contenders, frame, args.rounds, n, warm=frame.limit(500))
    print(
        f"{n:,} readings in {args.records:,} records x {args.rounds} rounds, local[2], "
        f"CPUs {sorted(os.sched_getaffinity(0))}, Spark {spark.version}"
    )
    print_table(rates, "plain peer: from_json + explode + windows")
    spark.stop()


if __name__ == "__main__":
    main()
