"""Where a micro-batch's fold runs (docs/design/any-pi-dies.md): on the driver, as sensor_aggregates
did before its switch, or on the executors, one task per readings partition, as it does now.
Both write what the app writes, to a real broker (one local KRaft node, plaintext).

Both designs take the same batches through sensor_aggregates' summary (`device_windows.summarize`:
Spark SQL, on the executors) and fold (`device_windows.fold`):

- driver: the summary's rows fetched to the driver and folded there against every device's
  state (`changelog.KafkaState`); the windows, the latest values, the state's changes and every
  partition's source offset go out in one transaction (`sink.TransactionalSink`), as the app did
  (`pikit_testkit.driver_fold.advance`);
- executors: `partition_fold.fold_batch`, what sensor_aggregates runs since the switch: the
  readings routed so that Spark's partition k holds readings partition k, summarized there, and
  folded by that task against its partition's state; it commits its partition's outputs, state
  changes and source offset in a transaction of its own (`partition_sink.PartitionSink`, kept by
  the Python worker between batches with the state).

A batch is `--seconds-per-batch` of readings at 1 reading/s per device, three metrics, every
device's readings on time. On a local cluster (each executor a JVM of its own with one core, its
Python workers beside it), it prints the CPU seconds per batch of the driver (its JVM and its
Python) and of the busiest executor (its JVM and its Python workers): median, min and max over
`--batches`, after `--warm` batches, for each design x device count x executor count, side by side.
The broker's CPU is not counted: it is the same Kafka work in both designs.

    .venv/bin/python -m bench.fold_placement [--devices 2,10000] [--executors 1,2] [--batches 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka import TopicPartition
from pikit_spark.aggregates import as_kafka_records, as_latest_records
from pikit_spark.changelog import KafkaState
from pikit_spark.device_windows import STATE_SCHEMAS, Advance, Timing
from pikit_spark.partition_fold import PartitionBatch, Writer, fold_batch
from pikit_spark.partition_sink import Slice
from pikit_spark.sink import Change, TransactionalSink
from pikit_spark.window_fold import WindowFolder
from pikit_testkit.broker import COMPACTED, LocalBroker, new_topic
from pikit_testkit.driver_fold import advance
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.proc import cpu_s
from pikit import REPO

PARTITIONS = 6  # the readings topic's (roles/kafka/defaults/main.yml)
METRICS = ("temperature", "humidity", "pressure")
T0 = 1_800_000_000
TIMING = Timing(window_s=60, slack_s=10, horizon_s=24 * 3600)
OFFSETS_PER_BATCH = 1_000  # each batch's slice of every readings partition (none is read)
# A design's batch: the frame, its index and its processing time -> how many partitions' state it
# read from Kafka whole (a worker that held none), and how many it caught up (a worker that held an
# older state: a task that ran where the partition's last task had not).
Run = Callable[[DataFrame, int, float], tuple[int, int]]


@dataclass(frozen=True)
class Topics:
    """One run's topics, new for each (the state starts empty)."""

    app: str
    readings: str
    aggregates: str
    latest: str
    state: str
    client: dict[str, Any]
    devices: int  # the i-th in readings partition i mod PARTITIONS: fewer leave partitions empty

    @classmethod
    def create(cls, broker: str, devices: int) -> Topics:
        made = {
            n: new_topic(broker, n, PARTITIONS, COMPACTED if n in ("latest", "state") else None)
            for n in ("readings", "aggregates", "latest", "state")
        }
        return cls(
            f"bench-{uuid.uuid4().hex[:8]}", **made, client={"bootstrap_servers": [broker]}, devices=devices
        )

    def records(self, step: Advance) -> dict[str, list[Change]]:
        """What sensor_aggregates writes of a batch's fold (the batches have no late reading and no
        dead letter)."""
        return {
            self.aggregates: list(as_kafka_records(step.closed)),
            self.latest: list(as_latest_records(step.closed)),
        }

    def slice(self, partition: int, index: int) -> Slice:
        """What the index-th batch read of the partition: nothing, where no device sends (a fold
        task given no row for a slice that read records takes its input as cut short)."""
        tp = TopicPartition(self.readings, partition)
        if partition >= self.devices:
            return Slice(tp, 0, 0)
        return Slice(tp, index * OFFSETS_PER_BATCH, (index + 1) * OFFSETS_PER_BATCH)


def batch(spark: SparkSession, devices: int, seconds: int, index: int) -> DataFrame:
    """`seconds` of readings of `devices` devices, the `index`-th batch, as readings.parse's
    verdicts: valid readings, the i-th device's in readings partition i mod PARTITIONS."""
    n = devices * seconds
    rows = spark.range(n)
    device = F.concat(F.lit("bench-"), (F.col("id") % devices).cast("string"))
    none = {"reason": "string", "index": "int", "offset": "long", "key": "binary", "record": "binary"}
    at = (F.col("id") / devices).cast("long")  # the second within the batch
    metric = F.element_at(F.array(*(F.lit(m) for m in METRICS)), (F.col("id") % 3 + 1).cast("int"))
    return rows.select(
        device.alias("device"),
        (F.lit(index * seconds) + at).alias("seq"),
        F.lit("sim").alias("sensor"),
        metric.alias("metric"),
        (F.lit(20.0) + (F.col("id") % 17) * 0.37).alias("value"),
        F.lit("C").alias("unit"),
        (F.lit(T0 + index * seconds) + at).cast("double").alias("ts"),
        (F.col("id") % devices % PARTITIONS).cast("int").alias("partition"),
        F.lit("readings").alias("topic"),
        *(F.lit(None).cast(ddl).alias(name) for name, ddl in none.items()),
    )


def on_the_driver(spark: SparkSession, topics: Topics) -> tuple[Run, Callable[[], None]]:
    state = KafkaState(topics.state, STATE_SCHEMAS, topics.client)
    sink = TransactionalSink([topics.aggregates, topics.latest, topics.state], topics.app, topics.client)

    def run(frame: DataFrame, index: int, processed_at: float) -> tuple[int, int]:
        step = advance(frame, processed_at, state.before(), TIMING)  # sensor_aggregates' own
        source = {part.readings: part.end for part in (topics.slice(p, index) for p in range(PARTITIONS))}
        sink.write(index, {**topics.records(step), topics.state: state.changes_to(step.state)}, source)
        state.committed()
        return 0, 0  # held by the driver from the start

    return run, sink.close


def on_the_executors(spark: SparkSession, topics: Topics) -> tuple[Run, Callable[[], None]]:
    writer = Writer(
        topics.app, (topics.aggregates, topics.latest), topics.state, STATE_SCHEMAS, topics.client
    )

    def run(frame: DataFrame, index: int, processed_at: float) -> tuple[int, int]:
        slices = {p: topics.slice(p, index) for p in range(PARTITIONS)}
        batch = PartitionBatch(index, processed_at, slices, writer, WindowFolder(TIMING, topics.records))
        folded = fold_batch(frame, batch)  # sensor_aggregates' own
        return sum(f.state_reads for f in folded), sum(f.catch_ups for f in folded)

    return run, lambda: None  # the writers end with the executors' Python workers


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _processes(spark: SparkSession) -> dict[str, list[int]]:
    """The driver's processes (this Python, its JVM) and each executor's (its JVM, its Python)."""
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    out: dict[str, list[int]] = {"driver": [os.getpid(), jvm]}
    for pid in _descendants(jvm):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in command:
            out[f"executor {pid}"] = [pid, *_descendants(pid)]
    return out


def _spent(groups: dict[str, list[int]]) -> dict[str, float]:
    spent = {}
    for name, pids in groups.items():
        total = 0.0
        for pid in pids:
            with contextlib.suppress(OSError):  # a Python worker that ended
                total += cpu_s(pid)
        spent[name] = total
    return spent


def measure(
    design: str, devices: int, executors: int, broker: str, args: argparse.Namespace
) -> dict[str, list[float]]:
    # The executors' Python workers are this venv's (PySpark reads the variable, not a setting).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(f"local-cluster[{executors},1,1024]")
        .appName(f"fold-{design}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(executors))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        # The executors' Python workers import this module for the fold's task.
        .config("spark.executorEnv.PYTHONPATH", str(REPO))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        design_of = on_the_driver if design == "driver" else on_the_executors
        run, close = design_of(spark, Topics.create(broker, devices))
        per_batch: dict[str, list[float]] = {
            "driver": [],
            "busiest executor": [],
            "state reads": [],
            "catch-ups": [],
        }
        try:
            for index in range(args.warm + args.batches):
                frame = batch(spark, devices, args.seconds_per_batch, index)
                processed_at = float(T0 + (index + 1) * args.seconds_per_batch + 1)
                groups = _processes(spark)
                before = _spent(groups)
                reads, catch_ups = run(frame, index, processed_at)
                after = _spent(groups)
                if index < args.warm:
                    continue
                used = {name: after[name] - before[name] for name in groups}
                per_batch["driver"].append(used.pop("driver"))
                per_batch["busiest executor"].append(max(used.values(), default=0.0))
                per_batch["state reads"].append(reads)
                per_batch["catch-ups"].append(catch_ups)
        finally:
            close()
        return per_batch
    finally:
        spark.stop()
        time.sleep(2)  # the local cluster's JVMs go before the next one starts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="2,10000", help="comma-separated device counts")
    parser.add_argument("--executors", default="1,2", help="comma-separated executor counts")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--warm", type=int, default=3, help="batches run first and not counted")
    parser.add_argument("--seconds-per-batch", type=int, default=10, help="the apps' trigger")
    args = parser.parse_args(argv)
    print("CPU seconds per batch: median (min-max)")
    print(
        f"{'design':<10} {'devices':>8} {'executors':>9}  {'driver':<20} {'busiest executor':<20} "
        "partitions' state a batch (mean): read whole, caught up"
    )
    busiest: dict[tuple[str, int, int], float] = {}
    driver: dict[tuple[str, int, int], float] = {}
    devices_wanted = [int(d) for d in args.devices.split(",")]
    executors_wanted = [int(e) for e in args.executors.split(",")]

    def record(design: str, devices: int, executors: int, spent: dict[str, list[float]]) -> None:
        cells = [
            f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
            for v in (spent["driver"], spent["busiest executor"])
        ]
        reads, caught = (statistics.mean(spent[name]) for name in ("state reads", "catch-ups"))
        print(
            f"{design:<10} {devices:>8} {executors:>9}  {cells[0]:<20} {cells[1]:<20} "
            f"{reads:>5.1f} {caught:>5.1f}",
            flush=True,
        )
        driver[design, devices, executors] = statistics.median(spent["driver"])
        busiest[design, devices, executors] = max(
            driver[design, devices, executors], statistics.median(spent["busiest executor"])
        )

    with tempfile.TemporaryDirectory() as work:
        broker = LocalBroker(Path(work))
        broker.start()
        try:
            for devices in devices_wanted:
                for executors in executors_wanted:
                    for design in ("driver", "executors"):
                        record(
                            design,
                            devices,
                            executors,
                            measure(design, devices, executors, broker.address, args),
                        )
        finally:
            broker.stop()
    # Issue 66's two ratios, each design beside the other: the busiest process's CPU with the
    # most executors against one, at the most devices; the driver's at the most devices against
    # the fewest, with one executor.
    most, fewest = max(devices_wanted), min(devices_wanted)
    one, many = min(executors_wanted), max(executors_wanted)
    for design in ("driver", "executors"):
        spread = busiest[design, most, many] / busiest[design, most, one]
        grows = driver[design, most, one] / driver[design, fewest, one]
        print(
            f"{design:<10} busiest process, {many} executors / {one}, {most} devices: {spread:.2f}x; "
            f"driver, {most} devices / {fewest}: {grows:.2f}x"
        )


if __name__ == "__main__":
    main()
