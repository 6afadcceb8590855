"""The streaming apps' own metrics: backlog arithmetic, the exposition, and a real query's progress."""

from __future__ import annotations

import json
import time
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest
from pikit_contract.readings import SCHEMAS_READ
from pikit_spark.metrics import AppMetrics, QueryProgress, records_behind
from pikit_testkit.broker import free_port
from pyspark.sql import SparkSession

from pikit.prometheus import parse, value


def _offsets(**partitions: int) -> str:
    return json.dumps({"sensor-readings": {p.lstrip("p"): o for p, o in partitions.items()}})


def test_records_behind_sums_each_partition_and_never_goes_negative() -> None:
    end, latest = _offsets(p0=100, p1=50, p2=9), _offsets(p0=130, p1=50, p2=7, p3=5)
    assert records_behind(end, latest) == {"sensor-readings": 30 + 0 + 0 + 5}
    assert records_behind(end, None) == {}
    assert records_behind("41", "57") == {}  # not a Kafka source (the rate source counts rows)


def _progress(batch: int, end: str, latest: str) -> SimpleNamespace:
    source = SimpleNamespace(endOffset=end, latestOffset=latest)
    return SimpleNamespace(
        name="stream",
        id="0f",
        batchId=batch,
        numInputRows=40,
        inputRowsPerSecond=4.0,
        processedRowsPerSecond=20.0,
        durationMs={"triggerExecution": 1500},
        sources=[source],
        timestamp="2026-11-25T10:00:00.000Z",
    )


def test_the_exposition_carries_the_last_progress_and_the_apps_counts() -> None:
    metrics = AppMetrics("sensor_aggregates")
    metrics.onQueryProgress(SimpleNamespace(progress=_progress(6, _offsets(p0=10), _offsets(p0=12))))
    metrics.onQueryProgress(SimpleNamespace(progress=_progress(7, _offsets(p0=12), _offsets(p0=19))))
    metrics.add("late_readings", 3)
    metrics.add("late_readings", 2)
    metrics.set("state_rows", 11)
    samples = parse(metrics.exposition())
    labels = {"app": "sensor_aggregates", "query": "stream"}
    assert value(samples, "pikit_query_batch_id", **labels) == 7
    assert value(samples, "pikit_query_records_behind", topic="sensor-readings", **labels) == 7
    assert value(samples, "pikit_query_batch_duration_seconds", **labels) == 1.5
    assert value(samples, "pikit_query_last_progress_timestamp_seconds", **labels) == 1795600800.0
    assert value(samples, "pikit_query_last_batch_end_timestamp_seconds", **labels) == 1795600801.5
    assert value(samples, "pikit_app_late_readings_total", app="sensor_aggregates") == 5
    assert value(samples, "pikit_app_state_rows", app="sensor_aggregates") == 11
    assert value(samples, "pikit_app_dead_letters_total", app="sensor_aggregates") == 0
    for schema in SCHEMAS_READ:  # what an agent roll-out checks first
        assert value(samples, "pikit_app_reading_schema", app="sensor_aggregates", schema=str(schema)) == 1


def test_each_device_is_exported_as_seen_when_the_batch_holding_it_ended() -> None:
    metrics = AppMetrics("anomaly_alerts")
    assert "pikit_device_" not in metrics.exposition()
    seen = "pikit_device_last_reading_timestamp_seconds"
    before = time.time()
    metrics.devices([("edge-1", 1795600800.0, False), ("edge-2", 1795600500.5, True)], 1795600800.0)
    after = time.time()
    samples = parse(metrics.exposition())
    # edge-1 was in the batch: seen when it ended; edge-2 keeps what the state says.
    ended = value(samples, seen, app="anomaly_alerts", device="edge-1")
    assert ended is not None and before <= ended <= after
    assert value(samples, seen, app="anomaly_alerts", device="edge-2") == 1795600500.5
    assert value(samples, "pikit_device_silent", app="anomaly_alerts", device="edge-1") == 0
    assert value(samples, "pikit_device_silent", app="anomaly_alerts", device="edge-2") == 1
    # The next batch holds no reading of edge-1: it keeps the end of the batch that had one; and
    # a batch that tells nothing of edge-2 (another partition's task) leaves it as it was.
    metrics.devices([("edge-1", 1795600800.0, False)], 1795600810.0)
    samples = parse(metrics.exposition())
    assert value(samples, seen, app="anomaly_alerts", device="edge-1") == ended
    assert value(samples, seen, app="anomaly_alerts", device="edge-2") == 1795600500.5
    assert [s.labels["device"] for s in samples if s.name == seen] == ["edge-1", "edge-2"]


def test_a_real_query_reports_its_progress_over_http(spark: SparkSession) -> None:
    metrics = AppMetrics("unit")
    spark.streams.addListener(metrics)
    server = metrics.serve(f"127.0.0.1:{free_port()}")
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .writeStream.format("noop")
        .queryName("rated")
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            samples = parse(urllib.request.urlopen(url, timeout=10).read().decode())
            if (value(samples, "pikit_query_batch_id", app="unit", query="rated") or 0) >= 2:
                break
            time.sleep(1)
        assert (value(samples, "pikit_query_batch_id", app="unit", query="rated") or 0) >= 2
        assert value(samples, "pikit_query_input_rows", app="unit", query="rated") is not None
    finally:
        query.stop()
        server.shutdown()
        spark.streams.removeListener(metrics)


def test_progress_of_a_query_without_sources_is_empty_backlog() -> None:
    progress = _progress(0, "", "")
    progress.sources = []
    assert QueryProgress.of(progress).records_behind == {}


def _window(device: str, start: int, mean: float) -> dict[str, Any]:
    return {
        "device": device,
        "sensor": "simulated",
        "metric": "temperature",
        "unit": "C",
        "window_start": start,
        "window_end": start + 60,
        "count": 6,
        "min": mean - 1,
        "max": mean + 1,
        "mean": mean,
        "stddev": 0.5,
    }


def test_the_latest_windows_are_gauges_only_when_asked_and_for_the_devices_asked() -> None:
    quiet = AppMetrics("sensor_aggregates")
    quiet.latest_windows([_window("edge-1", 60, 20.0)])
    assert "pikit_latest_" not in quiet.exposition(), "off by default: a series per device x sensor x metric"

    metrics = AppMetrics("sensor_aggregates")
    metrics.export_latest(["mean", "window_end"], ["edge-1"])
    one_batch = [_window("edge-1", 120, 21.0), _window("edge-1", 60, 20.0), _window("edge-2", 60, 9.0)]
    metrics.latest_windows(one_batch)
    metrics.latest_windows([_window("edge-1", 60, 19.0)])  # an older window, in a later batch
    samples = parse(metrics.exposition())
    series = {"app": "sensor_aggregates", "device": "edge-1", "sensor": "simulated", "metric": "temperature"}
    assert value(samples, "pikit_latest_mean", **series) == 21.0
    assert value(samples, "pikit_latest_window_end", **series) == 180
    assert not [s for s in samples if s.labels.get("device") == "edge-2"]
    with pytest.raises(ValueError, match="no such statistic of a window: median"):
        metrics.export_latest(["median"], [])
