"""A micro-batch folded by the tasks that hold its readings partitions, not by the driver
(docs/design/any-pi-dies.md, "The shape of (a) that also adds capacity").

The driver plans the batch and collects a few counts; the executors do the rest. What an app's
tasks are given and how they fold it is its `Folder` (sensor_aggregates' window_fold.py,
anomaly_alerts' alert_fold.py):

1. `route` spreads the batch's verdicts so that Spark's partition k holds readings partition k
   (sensor_aggregates' Folder then summarizes them where the route left them);
2. the task of partition k (`fold_partition`) folds its rows into partition k's state and
   commits the outputs, the state's changes and k's source offset in one transaction of its own
   (`partition_sink.PartitionSink`, which the Python worker keeps between batches with the state).
   A partition that read nothing still folds when its Folder's clock has passed what its state
   waits for (a silent device's window closes, or a device falls silent); else it has nothing to
   do, and `IdlePartitions` leaves its task out.

A Folder may defer devices to a second read (`SecondRead`): sensor_aggregates' tells a device's
resends by its state (a seq at or below its high-water mark, a window it had closed, or a seq
twice in the batch), writes nothing and returns those devices' marks; the driver summarizes their
readings again, once per seq and with the marks, and a second job folds those partitions. It is
rare: a resend follows an agent's crash.

A task folds its partition only when it was given all of the partition's rows. Spark ends a
Python task's input early when the rows fail on the JVM's side (a shuffle fetch from an executor
that died) or the executor dies while it sends them, and PySpark takes the closed stream for the
end of the data: the task would fold part of its slice, or none of it, and commit the slice's end.
So every row carries its partition's count of rows, a second read gives each of its partitions a
row of kind END as well, and a task whose rows fall short fails before it writes
(`IncompleteInputError`): Spark retries it."""

from __future__ import annotations

import functools
import math
import socket
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from kafka import KafkaConsumer
from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from pikit_spark.batches import CommittedBatch
from pikit_spark.partition_sink import Slice, for_partition
from pikit_spark.sink import Change, FoldDeferred
from pikit_spark.state import Tables

# A device's marks, as a second read takes them (the Folder's own: sensor_aggregates' high-water
# mark and the window end through which the device is closed).
Mark = tuple[int, int]
# The column of a fold's input that gives every row its partition's count of rows.
TOLD = "rows_of_partition"
# The kind of a second read's row that only says its partition is there (device_windows' kinds
# are the others).
END = "end"


@dataclass(frozen=True)
class Writer:
    """What a task needs to make its partition's writer: PartitionSink's arguments."""

    app: str
    outputs: tuple[str, ...]
    state_topic: str
    schemas: Mapping[str, str]
    client: Mapping[str, Any]  # kafka-python's options: paths that hold on every Spark node
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """What a partition's fold made of its rows and its state before them."""

    outputs: Mapping[str, Sequence[Change]]  # records by output topic
    state: Tables  # the partition's state after the batch
    counts: Mapping[str, int] = field(default_factory=dict)  # the app's counters (metric names)
    # The clock (Folder.clock) up to which a fold of no rows leaves `state` as it is and writes
    # nothing: IdlePartitions runs no task for the partition until the batch's clock passes it.
    idle_through: float = -math.inf
    told: tuple[Any, ...] = ()  # what else the driver wants to know of the fold (the app's own)


class Folder(ABC):
    """What an app's partition tasks do with a micro-batch: the rows each task is given, and how
    it folds them into its partition's state. Shipped to the executors with the batch."""

    # The app's counters (Step.counts' names, its metrics) and how the batch's log line says them.
    counted: ClassVar[Mapping[str, str]] = {}

    @abstractmethod
    def clock(self, processed_at: float) -> float:
        """The batch's time as Step.idle_through counts it."""

    @abstractmethod
    def rows(self, verdicts: DataFrame, partitions: int, batch: PartitionBatch) -> DataFrame:
        """The batch's verdicts as its tasks' input: in `partitions` Spark partitions (`route`), each
        row with its readings `partition` and its `route`."""

    @abstractmethod
    def fold(self, rows: list[Row], state: Tables, batch: PartitionBatch, k: int, *, second: bool) -> Step:
        """Partition k's rows (all of them) into its state. May raise SecondRead (not on a `second`
        read): devices to read again with their marks."""

    def again(self, resent: DataFrame, known: Mapping[str, Mark], batch: PartitionBatch) -> DataFrame:
        """A second read's input: the resent devices' verdicts (routed, once per seq) with the marks of
        those the state knows, in `rows`' columns."""
        raise NotImplementedError(f"{type(self).__name__} reads no batch twice")


@dataclass(frozen=True)
class PartitionBatch:
    """One micro-batch as every task of it is told: its id, its processing time, the slice of
    each readings partition it read, where to write and what."""

    batch_id: int
    processed_at: float
    slices: Mapping[int, Slice]
    writer: Writer
    folder: Folder
    # The app's batch log (pikit_spark/batches.py), which gets a record of each partition's commit
    # that read something or wrote something, naming the driver; None: no log.
    log: str | None = None
    driver: str = ""
    # The partitions whose commits this driver has not heard of (IdlePartitions): a fold that tells
    # the driver what changed tells it all of its state there. None: all of them.
    unheard: frozenset[int] | None = None

    def heard(self, k: int) -> bool:
        return self.unheard is not None and k not in self.unheard


@dataclass(frozen=True)
class Folded:
    """What one partition's task did with its share of a batch."""

    partition: int
    written: int | None  # records committed; None: the group held the slice's end already
    counts: Mapping[str, int] = field(default_factory=dict)  # Step.counts
    state_reads: int = 0  # 1 when the worker held no state of the partition, and read it whole
    catch_ups: int = 0  # 1 when it held an older one, and read the commits since
    host: str = ""  # the executor's
    # Where the task's commit went (fence, group, state, fold, commit: PartitionSink's steps, a step
    # again when it was retried).
    steps: tuple[tuple[str, float], ...] = ()
    state_rows: int = 0  # the partition's, after the batch
    idle_through: float = -math.inf  # Step.idle_through; -inf: not known
    told: tuple[Any, ...] = ()  # Step.told
    # The devices to read again, with the marks of those the state knows; None: folded.
    again: dict[str, Mark | None] | None = None

    @property
    def seconds(self) -> float:
        """The task's commit in all."""
        return sum(seconds for _, seconds in self.steps)


class IncompleteInputError(RuntimeError):
    """A task was given fewer of its partition's rows than Spark made: its input ended early."""


class SecondRead(FoldDeferred):
    """Devices of the partition resent readings: read them again, with these marks."""

    def __init__(self, marks: dict[str, Mark | None]) -> None:
        super().__init__(f"{len(marks)} devices resent readings")
        self.marks = marks


def route(frame: DataFrame, partitions: int) -> DataFrame:
    """`frame` (with a `partition` column: the readings partition) in `partitions` Spark
    partitions, the k-th holding readings partition k, by a `route` column. Spark hashes the route
    (its HashPartitioning: Murmur3, then pmod), so the route of partition k is a number whose hash
    lands on k. A grouping by keys that include `route` keeps the rows where they are."""
    keys = F.array(*(F.lit(key) for key in _route_keys(frame.sparkSession, partitions))).cast("array<bigint>")
    routed = frame.withColumn("route", F.element_at(keys, F.col("partition") + 1))
    return routed.repartition(partitions, "route")


# Each count of partitions' route keys, found once per process: a micro-batch's frame comes with a
# session object of its own, so a cache keyed by the session ran the keys' Spark job every batch.
_ROUTE_KEYS: dict[int, tuple[int, ...]] = {}


def _route_keys(spark: SparkSession, partitions: int) -> tuple[int, ...]:
    """The smallest numbers whose hashes land on partitions 0, 1, ...: one small Spark job, once."""
    if partitions not in _ROUTE_KEYS:
        landed = spark.range(64 * partitions).select("id", F.expr(f"pmod(hash(id), {partitions})").alias("k"))
        first = {row["k"]: row["id"] for row in landed.groupBy("k").agg(F.min("id").alias("id")).collect()}
        _ROUTE_KEYS[partitions] = tuple(first[k] for k in range(partitions))
    return _ROUTE_KEYS[partitions]


class IdlePartitions:
    """What a driver knows, from its own tasks' commits, of each readings partition's state: the
    horizon's end up to which a fold of nothing leaves it as it is, and its rows.

    A fold of a partition that read nothing closes a device's windows only when the horizon has
    passed the device's closed-through (device_windows.fold: the readings' clock has not moved),
    and otherwise writes nothing and changes nothing. Such a partition's task is left out of the
    batch: no Python task to schedule, no state to hold or read on the worker it would land on.
    The driver's first batch runs every partition's task; what it learns holds while it leads the
    app, because only its tasks commit (another driver's start fences them, and ends it). A batch
    that fails, or is stopped (a new keyring), may have committed some partitions unseen: the
    driver then forgets them all, and its next batch runs every task again."""

    def __init__(self) -> None:
        self._through: dict[int, float] = {}
        self._rows: dict[int, int] = {}

    def needed(self, batch: PartitionBatch) -> list[int]:
        """The partitions whose task the batch must run."""
        clock = batch.folder.clock(batch.processed_at)
        return sorted(
            k
            for k, part in batch.slices.items()
            if part.start != part.end or clock > self._through.get(k, -math.inf)
        )

    def unheard(self, partitions: Iterable[int]) -> frozenset[int]:
        """Those of the partitions whose last commit this driver has not learned."""
        return frozenset(k for k in partitions if k not in self._through)

    def learn(self, folded: Iterable[Folded]) -> None:
        for f in folded:
            if f.written is None:  # committed before, by a task that did not tell this driver
                self._through.pop(f.partition, None)
                self._rows.pop(f.partition, None)
            else:
                self._through[f.partition] = f.idle_through
                self._rows[f.partition] = f.state_rows

    def forget(self) -> None:
        self._through.clear()
        self._rows.clear()

    def state_rows(self, partitions: Iterable[int]) -> int | None:
        """The partitions' state rows after their last commit; None while one is not known."""
        rows = [self._rows.get(k) for k in partitions]
        return None if None in rows else sum(r or 0 for r in rows)


def fold_batch(
    verdicts: DataFrame, batch: PartitionBatch, idle: IdlePartitions | None = None
) -> list[Folded]:
    """The batch's verdicts (readings.parse's, with their `partition`) summarized, folded and
    committed partition by partition: one Spark job, or two when a device resent readings. With
    `idle`, the partitions it finds idle run no task, and have no Folded."""
    if idle is None:
        return _fold_batch(verdicts, batch)
    chosen = idle.needed(batch)
    needed = replace(batch, slices={k: batch.slices[k] for k in chosen}, unheard=idle.unheard(chosen))
    if not needed.slices:
        return []
    try:
        folded = _fold_batch(verdicts, needed, partitions=len(batch.slices))
    except BaseException:
        idle.forget()
        raise
    idle.learn(folded)
    return folded


def _fold_batch(verdicts: DataFrame, batch: PartitionBatch, partitions: int | None = None) -> list[Folded]:
    """fold_batch of `batch.slices` alone, of `partitions` readings partitions (all by default)."""
    partitions = partitions or len(batch.slices)
    summary = batch.folder.rows(verdicts, partitions, batch)
    first = _fold(summary, batch, second=False)
    deferred = [f for f in first if f.again is not None]
    if not deferred:
        return first
    marks = {device: mark for f in deferred for device, mark in (f.again or {}).items()}
    parts = sorted(f.partition for f in deferred)
    resent = route(verdicts.where(F.col("device").isin(sorted(marks))), partitions).dropDuplicates(
        ["device", "seq"]
    )
    known = {device: mark for device, mark in marks.items() if mark is not None}
    again = batch.folder.again(resent, known, batch)
    others = F.col("device").isNull() | ~F.col("device").isin(sorted(marks))
    kept = summary.where(F.col("partition").isin(parts) & others)
    redo = replace(batch, slices={k: batch.slices[k] for k in parts})
    # Every resent device's readings may be copies, and its partition hold no other device: the
    # END row keeps such a partition's input from being empty, which a task takes as cut short.
    rows = kept.unionByName(again).unionByName(_ends(kept, parts))
    second = _fold(route(rows, partitions), redo, second=True)
    return [f for f in first if f.again is None] + second


def _ends(summary: DataFrame, partitions: list[int]) -> DataFrame:
    """A row of kind END for each of the partitions, in the summary's columns (null but these)."""
    ends = summary.sparkSession.createDataFrame([(k,) for k in partitions], "partition int")
    said = {"kind": F.lit(END), "partition": F.col("partition")}
    return ends.select(
        *(said.get(f.name, F.lit(None).cast(f.dataType)).alias(f.name) for f in summary.schema.fields)
    )


def _fold(summary: DataFrame, batch: PartitionBatch, *, second: bool) -> list[Folded]:
    """The tasks of the batch's partitions alone: Spark runs no task for the others (the stage
    before, which reads and routes the batch, runs whole)."""

    def task(k: int, rows: Iterable[Row]) -> Iterator[Folded]:
        yield fold_partition(batch, k, list(rows), second=second)

    # The route holds one readings partition per Spark partition, where the rows already are: the
    # count needs no shuffle.
    tasks = summary.withColumn(TOLD, _rows_of_partition()).rdd.mapPartitionsWithIndex(task)
    return summary.sparkSession.sparkContext.runJob(tasks, lambda folded: folded, sorted(batch.slices))


@functools.cache
def _rows_of_partition() -> Column:
    # Built once: each PySpark function is a round trip to the driver's JVM.
    return F.count(F.lit(1)).over(Window.partitionBy("route"))


def complete(batch: PartitionBatch, k: int, rows: list[Row], *, second: bool) -> list[Row]:
    """Partition k's rows, when they are all that Spark made of them (each row says how many, and
    a second read's input holds an END row), without the END row; else IncompleteInputError. A first
    read's partition that read records and was given no row is cut short too, unless Kafka no
    longer holds those records (deleted by retention: Spark reported the loss as it read)."""
    told = {row[TOLD] for row in rows}
    if rows and told == {len(rows)}:
        return [row for row in rows if row["kind"] != END] if second else rows
    part = batch.slices[k]
    if not rows and not second and (part.start == part.end or _gone(batch.writer, part)):
        return []
    raise IncompleteInputError(
        f"the task of readings partition {k} was given {len(rows)} of its {sorted(told) or '?'} rows: "
        "Spark ended its input early (a fetch failed, or its executor died); nothing is written, and "
        "Spark runs the task again"
    )


def _gone(writer: Writer, part: Slice) -> bool:
    """Whether Kafka deleted every record of the slice."""
    consumer = KafkaConsumer(**{**writer.client, "request_timeout_ms": 30_000})
    try:
        return bool(consumer.beginning_offsets([part.readings])[part.readings] >= part.end)
    finally:
        consumer.close()


def fold_partition(batch: PartitionBatch, k: int, rows: list[Row], *, second: bool = False) -> Folded:
    """Readings partition k's rows folded into its state and committed (in the task that holds
    them), by the batch's Folder."""
    rows = complete(batch, k, rows, second=second)
    strays = {row["partition"] for row in rows} - {k}
    if strays:
        raise ValueError(f"the task of readings partition {k} was given rows of {sorted(strays)}")
    writer = batch.writer
    sink = for_partition(
        writer.app,
        k,
        list(writer.outputs),
        writer.state_topic,
        writer.schemas,
        dict(writer.client),
        **writer.options,
    )
    reads, catch_ups = sink.state_reads, sink.catch_ups
    done: list[Step] = []

    def folded(state: Tables) -> tuple[Mapping[str, Iterable[Change]], Tables]:
        step = batch.folder.fold(rows, state, batch, k, second=second)
        done.append(step)
        return {**step.outputs, **_logged(batch, k, step)}, step.state

    try:
        written = sink.commit(batch.batch_id, batch.slices[k], folded)
        deferred = None
    except SecondRead as read_again:
        written, deferred = None, read_again.marks
    told = Folded(
        k,
        written,
        state_reads=sink.state_reads - reads,
        catch_ups=sink.catch_ups - catch_ups,
        host=socket.gethostname(),
        steps=tuple(sink.steps.parts),
        again=deferred,
    )
    if written is None or not done:
        return told
    step = done[-1]
    return replace(
        told,
        counts=dict(step.counts),
        state_rows=sum(len(rows) for rows in step.state.values()),
        idle_through=step.idle_through,
        told=step.told,
    )


def _logged(batch: PartitionBatch, k: int, step: Step) -> dict[str, list[Change]]:
    """The batch log's record of partition k's commit, when it read or wrote something: a partition
    that read nothing and wrote nothing may commit only its state (a replay of it, nothing)."""
    part = batch.slices[k]
    if batch.log is None or (part.start == part.end and not any(step.outputs.values())):
        return {}
    logged = CommittedBatch(batch.writer.app, batch.batch_id, batch.processed_at, {k: part.end}, batch.driver)
    return {batch.log: [logged.record()]}


def batch_line(folded: list[Folded], counted: Mapping[str, str], idle: list[int] | None = None) -> str:
    """A batch's partitions as its log line tells them: what they wrote (`counted`: Folder.counted),
    where, what they skipped, and which ran no task (`idle`): what an operator reads of a slow batch."""
    written = [f for f in folded if f.written is not None]
    hosts = sorted({f.host for f in folded})
    counts = ", ".join(f"{sum(f.counts.get(n, 0) for f in written)} {said}" for n, said in counted.items())
    line = (
        f"committed {sum(f.written or 0 for f in written)} records of {len(written)} partitions on "
        f"{', '.join(hosts) or 'no executor'}: {counts}"
    )
    if idle:
        line += f"; partitions {idle} idle, no task"
    skipped = sorted(f.partition for f in folded if f.written is None)
    if skipped:
        line += f"; partitions {skipped} committed before"
    read = sorted(f.partition for f in folded if f.state_reads)
    if read:
        line += f"; the state of {read} read whole from Kafka"
    caught_up = sorted(f.partition for f in folded if f.catch_ups)
    if caught_up:
        line += f"; the state of {caught_up} caught up with another worker's commits"
    slowest = max(folded, key=lambda f: f.seconds, default=None)
    if slowest is not None and slowest.steps:
        steps = ", ".join(f"{step} {seconds:.2f}s" for step, seconds in slowest.steps)
        line += f"; slowest partition {slowest.partition} on {slowest.host}: {slowest.seconds:.2f}s ({steps})"
    return line
