"""The Parquet output's retention: daily_rollup deletes old dates of windows, never a daily row."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest
from pikit_spark import retention
from pikit_testkit.apps import app_module
from pyspark.sql import SparkSession

TODAY = dt.date(2026, 11, 28)


def _partition(table: Path, date: str, files: int = 2) -> Path:
    part = table / f"date={date}" / "batch=7"
    part.mkdir(parents=True)
    for i in range(files):
        (part / f"part-{i}.parquet").write_bytes(b"x" * 10)
    return part.parent


def test_the_retention_keeps_today_and_the_days_before_it(tmp_path: Path) -> None:
    for day in ("2026-11-24", "2026-11-25", "2026-11-26", "2026-11-28"):
        _partition(tmp_path, day)
    (tmp_path / "date=not-a-date").mkdir()
    (tmp_path / "_SUCCESS").touch()
    old = retention.expired(tmp_path, 3, TODAY)
    assert [(e.date, e.files, e.bytes) for e in old] == [("2026-11-24", 2, 20), ("2026-11-25", 2, 20)]
    assert retention.expired(tmp_path, 0, TODAY) == [], "0 keeps every date"
    assert retention.expired(tmp_path / "absent", 3, TODAY) == []


def test_a_date_not_rolled_up_is_kept_and_named(tmp_path: Path) -> None:
    for day in ("2026-11-20", "2026-11-21", "2026-11-28"):
        _partition(tmp_path, day)
    report = retention.apply(tmp_path, 3, TODAY, rolled_up={"2026-11-21", "2026-11-28"})
    assert [e.date for e in report.deleted] == ["2026-11-21"]
    assert report.kept_not_rolled_up == ["2026-11-20"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["date=2026-11-20", "date=2026-11-28"]
    assert report.summary(3, tmp_path) == (
        f"retention 3 days: deleted 1 dates (2026-11-21): 2 files, 20 bytes from {tmp_path}; "
        "kept 2026-11-20: past the retention but not in the daily table"
    )


def test_daily_rollup_rolls_up_every_date_then_deletes_the_old_windows(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    today = dt.datetime.now(dt.UTC).date()
    dates = [today - dt.timedelta(days=d) for d in (40, 31, 1, 0)]
    rows = [
        (d, "edge-1", "sim", "temperature", "C", n, 1.0, 3.0, 2.0, 0.5, 7)
        for d in dates
        for n in (4, 6)  # two windows a date
    ]
    schema = (
        "date date, device string, sensor string, metric string, unit string,"
        " count long, min double, max double, mean double, stddev double, batch long"
    )
    frame = spark.createDataFrame(rows, schema)
    frame.write.partitionBy("date", "batch").parquet(str(tmp_path / "aggregates"))
    app = app_module("daily_rollup")
    argv = ["--kafka-properties", "/unused", "--output-dir", str(tmp_path), "--retention-days", "30"]

    with caplog.at_level(logging.INFO, logger="pikit"):
        app.main(argv)

    daily = {(str(r.date), r["count"]) for r in spark.read.parquet(str(tmp_path / "daily")).collect()}
    assert daily == {(d.isoformat(), 10) for d in dates}, "every date rolled up, the old ones too"
    kept = sorted(p.name for p in (tmp_path / "aggregates").glob("date=*"))
    assert kept == [f"date={d.isoformat()}" for d in sorted(dates[2:])]
    assert f"deleted 2 dates ({dates[0].isoformat()}..{dates[1].isoformat()})" in caplog.text

    # A second run: the old dates' daily rows stay, though their windows are gone.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pikit"):
        app.main(argv)
    again = {(str(r.date), r["count"]) for r in spark.read.parquet(str(tmp_path / "daily")).collect()}
    assert again == daily
    assert "retention 30 days: nothing older" in caplog.text
