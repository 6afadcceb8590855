"""anomaly_alerts' rules and baseline (its partitions' judgement, pikit_spark/anomalies.py), and
daily_rollup's pooling, against plain Python."""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from typing import Any

import pytest
from pikit_spark.aggregates import as_kafka_records
from pikit_spark.anomalies import STATE_SCHEMAS, Reading, Rules, Threshold, excursion_starts, judge
from pikit_spark.rollup import as_daily_records, daily, dates_to_roll_up, windows_of
from pikit_spark.state import Tables
from pyspark.sql import SparkSession

from tests.unit.spark.records import T0


def _readings(values: list[float], start_seq: int = 0) -> list[Reading]:
    """edge-1's readings (anomalies.READING_COLUMNS), one a second from T0."""
    return [("edge-1", "sim", "temperature", start_seq + i, v, "C", T0 + i) for i, v in enumerate(values)]


class _Versions:
    """Each batch's state by batch id, the app's committed state as a replayed batch sees it: it
    starts again from its predecessor's."""

    def __init__(self) -> None:
        self.kept: dict[int, Tables] = {}

    def before(self, batch_id: int) -> Tables:
        older = [b for b in self.kept if b < batch_id]
        return (
            {n: list(r) for n, r in self.kept[max(older)].items()}
            if older
            else {n: [] for n in STATE_SCHEMAS}
        )

    def write(self, batch_id: int, tables: Tables) -> None:
        self.kept[batch_id] = {n: list(r) for n, r in tables.items()}


def test_threshold_syntax_is_checked() -> None:
    assert Threshold.parse("cpu.temperature=:80") == Threshold("cpu", "temperature", None, 80.0)
    assert Threshold.parse("bme280.humidity=5:95") == Threshold("bme280", "humidity", 5.0, 95.0)
    for bad in ("cpu.temperature", "cpu=1:2", "cpu.temperature=:", "cpu.t=a:b"):
        with pytest.raises(ValueError, match="threshold"):
            Threshold.parse(bad)


def test_baseline_matches_welford_across_batches_and_alerts_on_outliers() -> None:
    rules = Rules((Threshold("sim", "temperature", None, 30.0),), k=3.0, min_samples=10, baseline_n=10_000)
    store = _Versions()
    first = [20.0 + (i % 5) * 0.1 for i in range(40)]
    second = [20.0 + (i % 3) * 0.2 for i in range(25)]

    def run(batch_id: int, readings: list[Reading]) -> list[dict[str, Any]]:
        judged = judge(readings, store.before(batch_id), rules)
        store.write(batch_id, judged.state)
        return judged.alerts

    for batch_id, values in enumerate([first, second]):
        assert run(batch_id, _readings(values, start_seq=batch_id * 100)) == []
    # A replayed batch 1 starts again from batch 0's baseline: nothing counted twice.
    run(1, _readings(second, 100))
    # An agent resent batch 0's readings after a crash: below the seq mark, not counted again.
    run(2, _readings(first, 0))

    ((*_, n, mean, m2),) = store.before(3)["baseline"]
    everything = first + second
    assert n == len(everything)
    assert math.isclose(mean, statistics.fmean(everything), rel_tol=1e-12)
    assert math.isclose(m2 / n, statistics.pvariance(everything), rel_tol=1e-9)

    assert judge(_readings([20.1], start_seq=900), store.before(3), rules).seen == {"edge-1"}

    suspicious = _readings([20.2, 25.0, 31.0], start_seq=500)
    # seq 502 comes twice in the batch (a resend within it): one alert, counted once.
    found = run(3, suspicious + suspicious[2:])
    # 501 and 502 are both out of bounds: one excursion, one alert, at its first reading.
    assert [(r["seq"], r["readings_out"]) for r in found] == [(501, 2)]
    (alert,) = found
    assert alert["reason"].endswith(
        f"standard deviations from the baseline mean {statistics.fmean(everything):.3f}"
    )
    assert math.isclose(alert["baseline_stddev"], statistics.pstdev(everything), rel_tol=1e-9)
    assert (alert["value"], alert["unit"], alert["ts"]) == (25.0, "C", T0 + 1)
    assert store.before(4)["excursions"] == [("edge-1", "sim", "temperature")]
    ((*_, n, _, _),) = store.before(4)["baseline"]
    assert n == len(everything) + 3


def test_a_reading_without_a_baseline_is_judged_by_the_thresholds_alone() -> None:
    rules = Rules((Threshold("sim", "temperature", 5.0, 30.0), Threshold("sim", "temperature", None, 10.0)))

    def alerted(value: float) -> list[tuple[str, Any, Any]]:
        found = judge(_readings([value]), _empty(), rules).alerts
        return [(a["reason"], a["baseline_mean"], a["baseline_stddev"]) for a in found]

    # The first threshold that a reading breaks names it.
    assert alerted(31.0) == [("above 30", None, None)]
    assert alerted(4.0) == [("below 5", None, None)]
    assert alerted(20.0) == [("above 10", None, None)]
    assert alerted(9.0) == []


def test_one_alert_per_excursion_across_batches() -> None:
    key = ("edge-1", "sim", "temperature")

    def out(*seqs: int) -> list[dict[str, Any]]:
        return [
            {"device": key[0], "sensor": key[1], "metric": key[2], "seq": s, "reason": "above 30"}
            for s in seqs
        ]

    # Out at 3 and 4, back at 5: one alert, and the excursion is over.
    starts, under_way = excursion_starts(out(4, 3), {key: (5, 5)}, [])
    assert [(a["seq"], a["readings_out"]) for a in starts] == [(3, 2)] and under_way == []
    # Out from 7 to the end of the batch: it goes on into the next one, which raises nothing new.
    starts, under_way = excursion_starts(out(7, 8), {key: (6, 6)}, under_way)
    assert [a["seq"] for a in starts] == [7] and under_way == [key]
    starts, under_way = excursion_starts(out(9, 10), {}, under_way)
    assert starts == [] and under_way == [key]
    # Back within bounds only: over, and the next reading out is a new excursion.
    starts, under_way = excursion_starts([], {key: (11, 11)}, under_way)
    assert starts == [] and under_way == []
    starts, under_way = excursion_starts(out(12), {}, under_way)
    assert [a["seq"] for a in starts] == [12] and under_way == [key]
    # The excursion under way ends at 13, back within bounds, and 14 starts the next in the
    # same batch: its alert, although the batch began with one under way.
    starts, under_way = excursion_starts(out(14), {key: (13, 13)}, under_way)
    assert [(a["seq"], a["readings_out"]) for a in starts] == [(14, 1)] and under_way == [key]
    # Under way, out at 15, back at 16, out at 17 and 18, back at 19: 15 goes on with the
    # excursion, 17 starts the next, which ends at 19.
    starts, under_way = excursion_starts(out(15, 17, 18), {key: (16, 19)}, under_way)
    assert [(a["seq"], a["readings_out"]) for a in starts] == [(17, 3)] and under_way == []


def test_young_baseline_raises_no_deviation_alert() -> None:
    rules = Rules((), k=3.0, min_samples=10)
    young = judge(_readings([1.0, 2.0, 3.0]), _empty(), rules).state
    assert young["baseline"] and not judge(_readings([1000.0], 50), young, rules).alerts


def test_daily_rollup_pools_the_aggregates_topics_windows_exactly(spark: SparkSession) -> None:
    """From the aggregates topic's records as sensor_aggregates writes them, through the roll-up,
    to the daily topic's record, keyed by device/sensor/metric/date."""
    windows = [[1.0, 2.0, 3.0, 4.0], [10.0, 11.0], [5.0]]
    start = int(dt.datetime(2026, 11, 18, 23, 58, tzinfo=dt.UTC).timestamp())
    closed = [
        {
            "device": "edge-1",
            "sensor": "sim",
            "metric": "temperature",
            "unit": "C",
            "window_start": start + 60 * n,
            "window_end": start + 60 * (n + 1),
            "count": len(w),
            "min": min(w),
            "max": max(w),
            "mean": statistics.fmean(w),
            "stddev": statistics.pstdev(w),
        }
        for n, w in enumerate(windows)
    ]
    records = spark.createDataFrame([(value,) for _, value, _ in as_kafka_records(closed)], "value binary")
    days = [row.asDict() for row in daily(windows_of(records)).collect()]
    assert [d["date"] for d in days] == [dt.date(2026, 11, 18), dt.date(2026, 11, 19)], "UTC dates"
    day = days[0]
    flat = windows[0] + windows[1]
    assert (day["count"], day["min"], day["max"], day["windows"]) == (len(flat), 1.0, 11.0, 2)
    assert math.isclose(day["mean"], statistics.fmean(flat), rel_tol=1e-12)
    assert math.isclose(day["stddev"], statistics.pstdev(flat), rel_tol=1e-9)
    key, value, _ = as_daily_records(days)[1]
    assert key == b"edge-1/sim/temperature/2026-11-19"
    assert json.loads(value) == {
        "schema": 1,
        "date": "2026-11-19",
        "device": "edge-1",
        "sensor": "sim",
        "metric": "temperature",
        "count": 1,
        "min": 5.0,
        "max": 5.0,
        "mean": 5.0,
        "stddev": 0.0,
        "windows": 1,
        "unit": "C",
    }


def test_the_roll_up_takes_the_last_days_and_passes_over_a_date_retention_cut() -> None:
    today = dt.date(2026, 12, 2)
    present = [today - dt.timedelta(days=n) for n in range(5)]
    assert dates_to_roll_up(present, today, 3, trimmed=False) == (present[2::-1], [])
    # The topic lost its first records: its earliest date may lack its first windows.
    assert dates_to_roll_up(present[:3], today, 3, trimmed=True) == (present[1::-1], [present[2]])
    assert dates_to_roll_up(present, today, 3, trimmed=True) == (present[2::-1], []), "not among the chosen"
    asked = dates_to_roll_up(present, today, 3, trimmed=False, asked=["2026-11-28"])
    assert asked == ([dt.date(2026, 11, 28)], [])


def test_a_deviation_alone_is_found_and_a_calm_batch_raises_nothing() -> None:
    rules = Rules((), k=3.0, min_samples=10)
    state = judge(_readings([20.0 + (i % 5) * 0.1 for i in range(40)]), _empty(), rules).state
    assert judge(_readings([20.1, 20.3], 40), state, rules).alerts == []
    (alert,) = judge(_readings([20.2, 12.0, 20.1], 42), state, rules).alerts
    assert alert["seq"] == 43 and "standard deviations" in alert["reason"]


def _empty() -> dict[str, list[Any]]:
    return {name: [] for name in STATE_SCHEMAS}
