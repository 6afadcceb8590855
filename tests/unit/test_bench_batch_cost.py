"""bench.batch_cost's splits: a window's latency into the device's wait and the apps' part, a batch's
wall time into Spark's planning, its logs, its jobs and the driver's own work."""

from __future__ import annotations

from typing import Any

from bench.batch_cost import (
    PROGRESS_EVENT,
    WINDOW_S,
    Spent,
    app_cores,
    batches,
    busiest_executor,
    capacity,
    caught_up,
    closing_to_aggregate,
    driver_growth,
    executor_hosts,
    progress_batches,
)


def test_the_closing_record_is_the_first_sent_past_the_windows_end_and_the_slack() -> None:
    # A device sending a record every 10 s; its window [0, 60) closes with the first record
    # stamped at or past 60 + 8.
    records = {"bench-1": [float(t) for t in range(5, 200, 10)]}
    windows = {("bench-1", 0): 90.0, ("bench-1", 60): 150.0, ("bench-2", 0): 90.0}
    assert closing_to_aggregate(windows, records, slack=8) == [90.0 - 75, 150.0 - 135]
    assert WINDOW_S == 60


def test_a_window_whose_closing_record_was_never_sent_is_left_out() -> None:
    assert closing_to_aggregate({("bench-1", 0): 90.0}, {"bench-1": [5.0, 15.0]}, slack=8) == []


def test_a_batch_is_split_into_planning_logs_jobs_and_the_drivers_work() -> None:
    progress = {
        "batchId": 7,
        "timestamp": "2026-11-30T12:00:00.000Z",
        "sources": [{"numInputRows": 15}],
        "durationMs": {
            "triggerExecution": 1400,
            "queryPlanning": 200,
            "latestOffset": 30,
            "walCommit": 20,
            "addBatch": 1100,
            "commitOffsets": 10,
        },
    }
    start = 1_796_040_000.0  # 2026-11-30T12:00:00Z

    def job(number: int, at: float, took: float, tag: str | None) -> list[dict[str, Any]]:
        properties = {"streaming.sql.batchId": tag} if tag else {}
        return [
            {
                "Event": "SparkListenerJobStart",
                "Job ID": number,
                "Submission Time": at * 1000,
                "Properties": properties,
            },
            {"Event": "SparkListenerJobEnd", "Job ID": number, "Completion Time": (at + took) * 1000},
        ]

    events: list[dict[str, Any]] = [
        {"Event": PROGRESS_EVENT, "progress": progress},
        *job(1, start + 0.3, 0.15, "7"),  # the keys' broadcast, tagged
        *job(2, start + 0.8, 0.35, None),  # a job of the driver's own thread, while the batch ran
        *job(3, start + 9.0, 0.5, None),  # after the batch: not its own
    ]
    (batch,) = batches(events, start - 1, start + 1)
    assert (batch.jobs, round(batch.jobs_s, 3), batch.wall_s) == (2, 0.5, 1.4)
    parts = {k: round(v, 3) for k, v in batch.parts().items()}
    assert parts == {"planning": 0.2, "offset and commit logs": 0.06, "Spark jobs": 0.5, "driver": 0.6}


def test_the_executors_hosts_are_those_alive_at_the_end_of_the_log() -> None:
    def added(number: str, host: str) -> dict[str, Any]:
        return {"Event": "SparkListenerExecutorAdded", "Executor ID": number, "Executor Info": {"Host": host}}

    events: list[dict[str, Any]] = [
        added("0", "10.89.77.13"),
        added("1", "10.89.77.13"),
        {"Event": "SparkListenerExecutorRemoved", "Executor ID": "0", "Removed Reason": "lost"},
        added("2", "10.89.77.12"),
    ]
    assert executor_hosts(events) == ["10.89.77.12", "10.89.77.13"]
    assert executor_hosts(events[:2]) == ["10.89.77.13", "10.89.77.13"]  # two on one Pi: both listed


def test_batches_without_the_event_log_come_from_the_drivers_progress_lines() -> None:
    prefix = "pi-2 spark-submit[5941]: 2026-12-04 16:08:51,430 INFO pikit: query anomaly_alerts"
    lines = [
        f"1000.5 {prefix} batch 50: 15 rows in, 11.7 rows/s, 1285 ms (addBatch 949, queryPlanning 254)",
        f"1011.0 {prefix} batch 51: 0 rows in, 0.0 rows/s, 12 ms (latestOffset 12)",  # no input
        f"1021.0 {prefix} batch 52: 14 rows in, 6.3 rows/s, 2208 ms (addBatch 1281, walCommit 22)",
        "1022.0 pi-2 spark-submit[5941]: batch 52: committed 4 records of 2 partitions",
        f"1031.0 {prefix} batch 53: 14 rows in, 6.3 rows/s, 1000 ms (addBatch 900)",  # starts at 1030
    ]
    found = progress_batches(lines, 999.0, 1030.0)
    assert [(b.batch_id, b.rows, b.wall_s) for b in found] == [(50, 15, 1.285), (52, 14, 2.208)]
    assert found[0].started == 1000.5 - 1.285
    assert found[1].durations == {"addBatch": 1.281, "walCommit": 0.022}


def test_a_partition_caught_up_is_counted_once_per_batch_that_names_it() -> None:
    prefix = "pi-3 spark-submit[5216]: 2026-12-05 01:49:56,952 INFO pikit:"
    lines = [
        f"1000.0 {prefix} batch 14: committed 9168 records of 6 partitions on pi-2, pi-3: 0 windows "
        "closed; the state of [5] caught up with another worker's commits; slowest partition 5",
        f"1010.0 {prefix} batch 15: committed 9912 records of 6 partitions on pi-2, pi-3: 0 windows "
        "closed; the state of [1, 5] caught up with another worker's commits",
        f"1020.0 {prefix} batch 16: committed 14003 records of 6 partitions on pi-2, pi-3: 1997 windows",
        f"1030.0 {prefix} batch 17: committed 0 records of 0 partitions on no executor: 0 windows",
        f"1040.0 {prefix} batch 18: committed 10 records of 6 partitions on pi-2: the state of [2] caught up",
    ]
    assert caught_up(lines, 999.0, 1035.0) == (3, 3)


def test_a_cores_contender_changes_its_apps_cores_alone() -> None:
    apps = app_cores("sensor_aggregates", 1)["spark_apps"]
    assert apps["sensor_aggregates"]["total_cores"] == 1
    assert apps["anomaly_alerts"]["total_cores"] == 1
    assert apps["sensor_aggregates"]["options"]["readings_topic"] == "{{ pikit_readings_topic }}"
    apps = app_cores("anomaly_alerts", 2)["spark_apps"]
    assert (apps["anomaly_alerts"]["total_cores"], apps["sensor_aggregates"]["total_cores"]) == (2, 2)


def test_the_busiest_executor_is_the_one_that_spent_most_between_two_readings() -> None:
    before = {"pi-2/10": 100.0, "pi-3/20": 50.0}
    after = {"pi-2/10": 104.0, "pi-3/20": 56.5, "pi-3/30": 2.0}  # 30 began meanwhile
    assert busiest_executor(before, after) == 6.5


def test_the_capacity_ratio_pairs_each_turns_contender_and_says_when_its_batches_are_not_alike() -> None:
    # 2026-12-05's two turns at 10,000 devices: in the first, the one-executor phase fell behind.
    spent = [
        Spent(0, "", 1, 6.08, 33.57, 19_997),
        Spent(0, "", 2, 2.48, 23.53, 10_011),
        Spent(1, "", 2, 2.18, 23.00, 10_009),
        Spent(1, "", 1, 3.58, 36.57, 10_012),
        Spent(1, "sticky", 2, 2.0, 20.0, 10_000),  # no one-executor phase of its own: no ratio
    ]
    assert capacity(spent) == [
        "turn 1: the busiest executor with 2 against 1: 0.41x per batch, 0.70x per row in (batches of "
        "19,997 and 10,011 rows: not alike, compare per row in, one contender fell behind)",
        "turn 2: the busiest executor with 2 against 1: 0.61x per batch, 0.63x per row in",
    ]


def test_a_drivers_growth_is_its_cpu_with_the_devices_against_the_demos() -> None:
    spent = {
        ("", "anomaly_alerts", "demo"): [0.20, 0.30],
        ("", "anomaly_alerts", "devices"): [0.50],
        ("", "sensor_aggregates", "devices"): [0.40],  # no demo phase: no ratio
    }
    (line,) = driver_growth(spent)
    assert line == (
        "anomaly_alerts: its driver's CPU per batch 0.50 s with the synthetic devices against 0.25 s "
        "at the demo's: 2.00x (issue 66: <= 2x)"
    )
