"""A micro-batch folded by the tasks that hold its readings partitions (pikit_spark/
partition_fold.py), on a real Spark and a real broker, against sensor_aggregates' fold on the
driver (pikit_testkit.driver_fold.advance) as the model: the same batches give the same windows, late
readings and dead letters, and the same state, with resends across and within batches, a
device gone silent, a partition that reads nothing, a batch run twice, a task killed in its
transaction, and the tasks of idle partitions left out."""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition
from pikit_contract.failpoints import SINK_BEFORE_COMMIT
from pikit_contract.readings import Reading, encode_batch
from pikit_spark import partition_fold
from pikit_spark.aggregates import as_kafka_records
from pikit_spark.changelog import read_state
from pikit_spark.device_windows import STATE_SCHEMAS, Advance, Timing, late_records
from pikit_spark.partition_fold import Folded, IdlePartitions, PartitionBatch, Writer, fold_batch
from pikit_spark.partition_sink import Slice
from pikit_spark.readings import dead_letter_records, parse
from pikit_spark.sink import Change
from pikit_spark.state import Tables
from pikit_spark.window_fold import Outputs, WindowFolder
from pikit_testkit.broker import COMPACTED, new_topic
from pikit_testkit.driver_fold import advance
from pikit_testkit.local_spark import local_session
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, lit, raise_error, when

from pikit.topic import read_to_end

T0 = 1_790_000_040  # a window's start (60 s windows), in the past
TIMING = Timing(window_s=60, slack_s=10, horizon_s=300)
PARTITIONS = 3
# Two devices in each readings partition, as the agent's key puts them.
HOME = {"d0": 0, "d1": 0, "d2": 1, "d3": 1, "d4": 2, "d5": 2}
METRICS = ("temperature", "humidity")


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # local[2, 4]: a task may fail 4 times, as on a cluster (local mode's default is once).
    session = local_session("pikit-partition-fold", "local[2,4]")
    yield session
    session.stop()


def outputs_to(topics: Mapping[str, str]) -> Outputs:
    """What sensor_aggregates writes of a fold, to these topics (a closure: Spark pickles it whole
    for the tasks, which cannot import a test module)."""

    def records(advanced: Advance) -> dict[str, list[Change]]:
        return {
            topics["aggregates"]: list(as_kafka_records(advanced.closed)),
            topics["late"]: list(late_records(advanced.late)),
            topics["dead"]: list(dead_letter_records(advanced.dead)),
        }

    return records


class Site:
    """One test's topics, its readings' offsets so far, and the model's state."""

    def __init__(self, broker: str, failpoints: str | None = None) -> None:
        self.broker = broker
        self.client = {"bootstrap_servers": [broker]}
        self.readings = new_topic(broker, "readings", PARTITIONS)
        self.outputs = {name: new_topic(broker, name, 1) for name in ("aggregates", "late", "dead")}
        self.state = new_topic(broker, "state", PARTITIONS, COMPACTED)
        options = {"retry_for": 60, **({"failpoints": failpoints} if failpoints else {})}
        self.writer = Writer(
            f"fold-{uuid.uuid4().hex[:6]}",
            tuple(self.outputs.values()),
            self.state,
            STATE_SCHEMAS,
            self.client,
            options,
        )
        self.offsets = dict.fromkeys(range(PARTITIONS), 0)
        self.model: Tables = {"windows": [], "devices": []}
        self.expected: Counter[tuple[str, bytes | None, bytes | None]] = Counter()
        self.batches = 0

        self.records = outputs_to(self.outputs)

    def batch(
        self, spark: SparkSession, sent: list[tuple[str, bytes]], processed_at: float
    ) -> tuple[DataFrame, PartitionBatch]:
        """The verdicts of `sent` (device, record value) and the batch that reads them."""
        rows, starts = [], dict(self.offsets)
        for device, value in sent:
            k = HOME[device]
            rows.append((device.encode(), value, self.readings, k, self.offsets[k]))
            self.offsets[k] += 1
        records = spark.createDataFrame(
            rows, "key binary, value binary, topic string, partition int, offset long"
        )
        verdicts = parse(records).verdicts
        slices = {
            k: Slice(TopicPartition(self.readings, k), starts[k], self.offsets[k]) for k in range(PARTITIONS)
        }
        folder = WindowFolder(TIMING, self.records)
        batch = PartitionBatch(self.batches, processed_at, slices, self.writer, folder)
        self.batches += 1
        return verdicts, batch

    def modelled(self, verdicts: DataFrame, processed_at: float) -> None:
        """The driver's fold of the same batch (sensor_aggregates' today), into the expected records."""
        step = advance(verdicts, processed_at, self.model, TIMING)
        self.model = step.state
        for topic, changes in self.records(step).items():
            self.expected.update((topic, key, value) for key, value, _ in changes)

    def written(self) -> Counter[tuple[str, bytes | None, bytes | None]]:
        return Counter(
            (topic, r.key, r.value)
            for topic in self.outputs.values()
            for r in read_to_end(topic, bootstrap_servers=[self.broker])
        )

    def state_read_back(self) -> Tables:
        tables: Tables = {"windows": [], "devices": []}
        for k in range(PARTITIONS):
            for name, rows in read_state(self.state, STATE_SCHEMAS, self.client, partition=k).items():
                tables[name].extend(rows)
        return {name: sorted(rows) for name, rows in tables.items()}


def readings(device: str, seqs: Iterable[int], at: float | None = None) -> bytes:
    """One record of `device`'s readings: a reading of one metric per seq, at `at` (or T0 + seq)."""
    return encode_batch(
        device,
        [
            Reading(device, seq, "sim", METRICS[seq % 2], 20.0 + seq % 7, "C", T0 + seq if at is None else at)
            for seq in seqs
        ],
    )


def run(
    spark: SparkSession,
    site: Site,
    sent: list[tuple[str, bytes]],
    processed_at: float,
    idle: IdlePartitions | None = None,
) -> tuple[list[Folded], int]:
    """The batch folded by the tasks (leaving out those `idle` finds idle), and by the model (which
    folds every partition); how many Spark jobs the tasks' took."""
    verdicts, batch = site.batch(spark, sent, processed_at)
    needed = list(range(PARTITIONS)) if idle is None else idle.needed(batch)
    group = uuid.uuid4().hex
    spark.sparkContext.setJobGroup(group, "fold_batch")
    try:
        folded = fold_batch(verdicts, batch, idle)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    site.modelled(verdicts, processed_at)
    assert sorted(f.partition for f in folded) == needed, folded
    return folded, len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def assert_same(site: Site) -> None:
    """What the tasks wrote is what the model expects: the same records, a window's mean and
    stddev equal but for the last bits (pooled in another order than Spark's one aggregate)."""
    written, expected = _comparable(site.written()), _comparable(site.expected)
    assert [w[:3] for w in written] == [e[:3] for e in expected]
    for w, e in zip(written, expected, strict=True):
        assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(w[3], e[3], strict=True)), (w, e)


def assert_same_state(site: Site) -> None:
    """The state the tasks committed is the model's (floats but for their last bits)."""
    got, want = site.state_read_back(), {name: sorted(rows) for name, rows in site.model.items()}
    assert {name: len(rows) for name, rows in got.items()} == {name: len(rows) for name, rows in want.items()}
    for name, rows in got.items():
        for a, b in zip(rows, want[name], strict=True):
            assert all(
                math.isclose(x, y, rel_tol=1e-12) if isinstance(x, float) else x == y
                for x, y in zip(a, b, strict=True)
            ), (a, b)


def _comparable(records: Counter[tuple[str, bytes | None, bytes | None]]) -> list[tuple[Any, ...]]:
    """Each record (as often as it was written) as its topic, key, exact part and floats."""
    out = []
    for (topic, key, value), times in records.items():
        floats: tuple[float, ...] = ()
        if value is not None and b'"stddev"' in value:
            doc = json.loads(value)
            floats = (doc.pop("mean"), doc.pop("stddev"))
            value = json.dumps(doc, sort_keys=True).encode()
        out.extend([(topic, key or b"", value or b"", floats)] * times)
    return sorted(out)


def test_the_tasks_fold_what_the_driver_folds(spark: SparkSession, broker: str) -> None:
    site = Site(broker)
    every = list(HOME)
    # Two windows' worth from every device, and a record that breaks the contract.
    run(spark, site, [(d, readings(d, range(0, 40))) for d in every] + [("d2", b'{"schema":1}')], T0 + 45)
    run(spark, site, [(d, readings(d, range(40, 100))) for d in every], T0 + 105)
    assert site.expected
    assert_same(site)
    # d0 resends what it had sent (an agent restarted: at or below its mark); d1 sends a seq twice
    # in the batch; d2 reads a window it had closed (late); d4 and d5 fall silent, so readings
    # partition 2 reads nothing.
    folded, jobs = run(
        spark,
        site,
        [
            ("d0", readings("d0", range(90, 130))),
            ("d1", readings("d1", range(100, 120))),
            ("d1", readings("d1", range(110, 130))),
            ("d2", readings("d2", [100, 101], at=T0 + 5)),
            ("d2", readings("d2", range(102, 130))),
            ("d3", readings("d3", range(100, 130))),
        ],
        T0 + 135,
    )
    assert jobs == 2, "a second read, for the resent devices' partitions alone"
    assert {f.partition: f.written for f in folded}[2] is not None
    assert_same(site)
    # Past the horizon: the silent devices' windows close in a partition that reads nothing.
    folded, jobs = run(spark, site, [("d0", readings("d0", range(130, 140)))], T0 + 700)
    assert jobs == 1
    closed = Counter(
        json.loads(v)["device"] for t, _, v in site.expected if t == site.outputs["aggregates"] and v
    )
    assert closed["d4"] == closed["d5"] > 0
    assert_same(site)
    assert_same_state(site)
    # The same batch again (a driver replaying it after its commit): nothing is written twice.
    verdicts, batch = site.batch(spark, [], T0 + 700)
    assert all(f.written is None or f.written == 0 for f in fold_batch(verdicts, batch))
    assert_same(site)


def test_a_task_killed_in_its_transaction_is_retried_and_writes_once(
    spark: SparkSession, broker: str, tmp_path: Path
) -> None:
    site = Site(broker, failpoints=str(tmp_path))
    run(spark, site, [(d, readings(d, range(0, 40))) for d in HOME], T0 + 45)
    # The next transaction's worker is killed after its sends and offsets, before its commit.
    (tmp_path / "failpoints").mkdir()
    (tmp_path / "failpoints" / SINK_BEFORE_COMMIT).touch()
    folded, _ = run(spark, site, [(d, readings(d, range(40, 100))) for d in HOME], T0 + 105)
    assert not (tmp_path / "failpoints" / SINK_BEFORE_COMMIT).exists(), "the failpoint fired"
    # The retried task ran in a new worker, which read its partition's state back from Kafka.
    assert sum(f.state_reads for f in folded) >= 1
    assert_same(site)
    assert_same_state(site)


def test_a_partition_that_reads_nothing_and_closes_nothing_runs_no_task(
    spark: SparkSession, broker: str
) -> None:
    site, idle = Site(broker), IdlePartitions()
    folded, _ = run(spark, site, [(d, readings(d, range(0, 40))) for d in HOME], T0 + 45, idle)
    assert [f.partition for f in folded] == [0, 1, 2], "a driver's first batch runs every partition's task"
    # d4 and d5 fall silent: partition 2 reads nothing, and the horizon is far from their windows.
    awake = ["d0", "d1", "d2", "d3"]
    folded, _ = run(spark, site, [(d, readings(d, range(40, 100))) for d in awake], T0 + 105, idle)
    assert [f.partition for f in folded] == [0, 1]
    folded, jobs = run(spark, site, [], T0 + 115, idle)
    assert (folded, jobs) == ([], 0), "a batch with nothing to do runs no Spark job"
    assert_same(site)
    # Past the horizon: partition 2's task runs again, and closes its silent devices' windows.
    folded, _ = run(spark, site, [("d0", readings("d0", range(100, 110)))], T0 + 700, idle)
    assert 2 in [f.partition for f in folded]
    closed = Counter(
        json.loads(v)["device"] for t, _, v in site.expected if t == site.outputs["aggregates"] and v
    )
    assert closed["d4"] == closed["d5"] > 0
    # Every device's windows now close at the horizon, which stays until the next minute.
    folded, _ = run(spark, site, [("d0", readings("d0", range(110, 120)))], T0 + 710, idle)
    assert [f.partition for f in folded] == [0]
    assert_same(site)
    assert_same_state(site)
    assert idle.state_rows(range(PARTITIONS)) == sum(len(rows) for rows in site.model.values())


def test_a_task_whose_input_failed_in_spark_commits_nothing_and_its_retry_is_exact(
    spark: SparkSession, broker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark ends a Python task's input early when the rows fail on the JVM's side (a shuffle
    fetch from an executor that died: FetchFailed), and PySpark takes the closed stream for the
    end of the data. The task of that partition must not fold what it got and commit the slice."""
    site = Site(broker)
    run(spark, site, [(d, readings(d, range(0, 40))) for d in HOME], T0 + 45)
    original = partition_fold._fold

    def failing(summary: DataFrame, batch: PartitionBatch, *, second: bool) -> list[Folded]:
        # Every attempt of partition 0's task fails while Spark makes its rows, as a fetch does.
        broken = when(col("device") == "d1", raise_error(lit("a fetch failed"))).otherwise(0)
        return original(summary.withColumn("_broken", broken), batch, second=second)

    monkeypatch.setattr(partition_fold, "_fold", failing)
    verdicts, batch = site.batch(spark, [(d, readings(d, range(40, 100))) for d in HOME], T0 + 105)
    with pytest.raises(Exception, match="a fetch failed"):
        fold_batch(verdicts, batch)
    monkeypatch.setattr(partition_fold, "_fold", original)
    # The driver runs the batch again, as Spark does after a failed micro-batch.
    folded = fold_batch(verdicts, batch)
    site.modelled(verdicts, T0 + 105)
    assert {f.partition: f.written is not None for f in folded}[0], "partition 0 was committed before"
    assert_same(site)
    assert_same_state(site)
