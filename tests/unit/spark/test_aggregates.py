"""sensor_aggregates' windows over a file stream: duplicates, late data, a restart from the checkpoint."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from pikit_spark.aggregates import as_kafka_records, deduplicated, window_stats, write_parquet
from pikit_spark.readings import parse
from pyspark.sql import SparkSession

from tests.unit.spark.records import T0, batch, reading

KAFKA_SCHEMA = "key binary, value binary, topic string, partition int, offset long"


class Feed:
    """A directory the stream reads, one file per simulated Kafka poll."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark, self.dir, self.offset = spark, root / "in", 0
        self.dir.mkdir()

    def send(self, *records: bytes) -> None:
        rows = []
        for value in records:
            rows.append((b"edge-1", value, "sensor-readings", 0, self.offset))
            self.offset += 1
        frame = self.spark.createDataFrame(rows, KAFKA_SCHEMA).coalesce(1)
        frame.write.parquet(str(self.dir / f"poll-{self.offset:06d}"))


def _start(spark: SparkSession, root: Path) -> Any:
    records = (
        spark.readStream.schema(KAFKA_SCHEMA).option("recursiveFileLookup", "true").parquet(str(root / "in"))
    )
    stats = window_stats(deduplicated(parse(records).readings, "30 seconds"), "1 minute")
    out = str(root / "out")
    return (
        stats.writeStream.foreachBatch(lambda frame, batch_id: write_parquet(frame, out, batch_id))
        .option("checkpointLocation", str(root / "checkpoint")).outputMode("append").start()
    )  # fmt: skip


def _windows(spark: SparkSession, root: Path) -> list[dict[str, Any]]:
    rows = spark.read.parquet(str(root / "out")).collect()
    return sorted((r.asDict() for r in rows), key=lambda r: r["window_start"])


def _expect(values: list[float]) -> tuple[int, float, float, float, float]:
    return len(values), min(values), max(values), statistics.fmean(values), statistics.pstdev(values)


def test_windows_drop_duplicates_and_late_data_and_survive_a_restart(
    spark: SparkSession, tmp_path: Path
) -> None:
    feed = Feed(spark, tmp_path)
    first = [reading(i, T0 + i, value=float(i)) for i in range(60)]
    second = [reading(60 + i, T0 + 60 + i, value=float(i % 7)) for i in range(60)]
    query = _start(spark, tmp_path)
    feed.send(batch("edge-1", first[:30]), batch("edge-1", first[30:] + second))
    query.processAllAvailable()
    # The agent resent a batch after a crash; a reading far ahead moves the watermark on.
    feed.send(batch("edge-1", first[20:40]), batch("edge-1", [reading(200, T0 + 200, value=5.0)]))
    query.processAllAvailable()
    query.stop()

    # A restart resumes from the checkpoint: nothing emitted before is emitted again.
    query = _start(spark, tmp_path)
    late = reading(201, T0 + 10, value=1000.0)  # its window closed long ago
    feed.send(batch("edge-1", [late, reading(202, T0 + 400, value=9.0)]))
    query.processAllAvailable()
    query.stop()

    windows = _windows(spark, tmp_path)
    assert [w["window_start"] for w in windows] == [T0, T0 + 60, T0 + 180]
    got = [(w["count"], w["min"], w["max"], w["mean"], w["stddev"]) for w in windows]
    expected = [
        _expect([float(i) for i in range(60)]),
        _expect([float(i % 7) for i in range(60)]),
        _expect([5.0]),
    ]
    for g, e in zip(got, expected, strict=True):
        assert g[:3] == e[:3]
        assert abs(g[3] - e[3]) < 1e-9 and abs(g[4] - e[4]) < 1e-9


def test_a_replayed_batch_replaces_its_own_parquet_files(spark: SparkSession, tmp_path: Path) -> None:
    rows = [(b"k", batch("edge-9", [reading(1, T0, value=2.0), reading(2, T0 + 61, value=4.0)]), "t", 0, 0)]
    stats = window_stats(parse(spark.createDataFrame(rows, KAFKA_SCHEMA)).readings, "1 minute")
    out = str(tmp_path / "out")
    write_parquet(stats, out, 7)
    write_parquet(stats, out, 8)
    write_parquet(stats, out, 7)  # the driver died after writing batch 7; it runs again
    got = spark.read.parquet(out).groupBy("batch").count().orderBy("batch").collect()
    assert [(r["batch"], r["count"]) for r in got] == [(7, 2), (8, 2)]


def test_aggregate_records_are_keyed_by_device(spark: SparkSession) -> None:
    rows = [(b"k", batch("edge-9", [reading(1, T0, value=2.0), reading(2, T0 + 1, value=4.0)]), "t", 0, 0)]
    stats = window_stats(parse(spark.createDataFrame(rows, KAFKA_SCHEMA)).readings, "1 minute")
    (record,) = as_kafka_records(stats).collect()
    assert bytes(record["key"]) == b"edge-9"
    import json

    body = json.loads(bytes(record["value"]))
    assert body == {
        "schema": 1, "device": "edge-9", "sensor": "sim", "metric": "temperature", "unit": "C",
        "window_start": int(T0), "window_end": int(T0) + 60, "count": 2, "min": 2.0, "max": 4.0, "mean": 3.0,
        "stddev": 1.0,
    }  # fmt: skip
