"""The apps' own state: one JSON version per micro-batch, written atomically, and the Parquet
versions of the earlier release still read."""

from __future__ import annotations

import os
from pathlib import Path

from pikit_spark.device_windows import STATE_SCHEMAS
from pikit_spark.state import Tables, VersionedTables
from pyspark.sql import SparkSession

WINDOW = ("edge-1", "sim", "t", "C", 1_800_000_000, 3, 2.5, 0.5, 1.0, 4.0)
DEVICE = ("edge-1", 41, 1_800_000_059.5, 1_800_000_000)


def test_a_batch_reads_the_version_before_it_so_a_replay_reads_what_its_first_run_read(
    spark: SparkSession, tmp_path: Path
) -> None:
    tables = VersionedTables(spark, str(tmp_path), STATE_SCHEMAS, keep=2)
    assert tables.before(0) == {"windows": [], "devices": []}
    for batch_id in range(5):
        tables.write(batch_id, {"windows": [WINDOW] * batch_id, "devices": [DEVICE]})
    assert len(tables.before(4)["windows"]) == 3, "batch 4 replayed reads batch 3's version"
    assert tables.before(9) == {"windows": [WINDOW] * 4, "devices": [DEVICE]}
    assert tables.versions() == [2, 3, 4], "the newest, and `keep` before it"
    (tmp_path / ".batch=5.json.tmp").write_text('{"windows": [')  # a write cut off by a crash
    assert tables.versions() == [2, 3, 4] and tables.before(6)["devices"] == [DEVICE]


def test_the_parquet_layout_of_the_earlier_release_is_read_and_then_replaced(
    spark: SparkSession, tmp_path: Path
) -> None:
    for name, rows in {"windows": [WINDOW], "devices": [DEVICE]}.items():
        frame = spark.createDataFrame(rows, STATE_SCHEMAS[name])
        frame.write.parquet(str(tmp_path / "batch=7" / name))
    (tmp_path / "batch=6" / "windows").mkdir(parents=True)  # incomplete: no _SUCCESS, no devices
    tables = VersionedTables(spark, str(tmp_path), STATE_SCHEMAS, keep=1)
    assert tables.versions() == [7]
    assert tables.before(8) == {"windows": [WINDOW], "devices": [DEVICE]}
    for batch_id in (8, 9, 10):
        tables.write(batch_id, tables.before(batch_id))
    assert tables.versions() == [9, 10] and not (tmp_path / "batch=7").exists()
    assert tables.before(11) == {"windows": [WINDOW], "devices": [DEVICE]}


def test_the_version_a_driver_wrote_is_read_back_from_memory_and_only_while_its_file_is_unchanged(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The next batch reads what this driver wrote without parsing the file again; what it
    gets equals the file's content, and a file rewritten by another driver is read instead."""
    tables = VersionedTables(spark, str(tmp_path), STATE_SCHEMAS)
    written: Tables = {"windows": [WINDOW], "devices": [DEVICE]}
    tables.write(3, written)
    written["devices"].append(DEVICE)  # the caller's lists are not the cache
    cached = tables.before(4)
    assert cached == VersionedTables(spark, str(tmp_path), STATE_SCHEMAS).before(4)
    assert cached == {"windows": [WINDOW], "devices": [DEVICE]}
    cached["windows"].clear()  # nor is what a batch was given
    assert tables.before(4)["windows"] == [WINDOW]
    file = tmp_path / "batch=3.json"
    stat = file.stat()
    file.write_text(file.read_text().replace("edge-1", "edge-9"))  # same size, same time
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert tables.before(4)["devices"] == [DEVICE], "from memory: the file was not read"
    VersionedTables(spark, str(tmp_path), STATE_SCHEMAS).write(3, {"windows": [], "devices": [DEVICE] * 2})
    assert tables.before(4) == {"windows": [], "devices": [DEVICE] * 2}, "another driver's version"
