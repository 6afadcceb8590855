"""`pikit latest`: the last value of each key of the latest topic, and its table."""

from __future__ import annotations

import json
from types import SimpleNamespace

from pikit.latest import newest, table


def window(device: str, metric: str, start: int, mean: float) -> dict[str, object]:
    return {
        "schema": 1,
        "device": device,
        "sensor": "bme280",
        "metric": metric,
        "unit": "C",
        "window_start": start,
        "window_end": start + 60,
        "count": 12,
        "min": mean - 1,
        "max": mean + 1,
        "mean": mean,
        "stddev": 0.5,
    }


def record(value: dict[str, object] | None, key: str | None = None) -> SimpleNamespace:
    if value is not None:
        key = f"{value['device']}/{value['sensor']}/{value['metric']}"
    return SimpleNamespace(
        key=(key or "").encode(), value=None if value is None else json.dumps(value).encode()
    )


RECORDS = [
    record(window("edge-1", "temperature", 1_800_000_000, 20.0)),
    record(window("edge-10", "temperature", 1_800_000_000, 30.0)),
    record(window("edge-1", "humidity", 1_800_000_000, 50.0)),
    # Not compacted yet: the older value of edge-1's temperature is still in the log.
    record(window("edge-1", "temperature", 1_800_000_060, 21.5)),
]


def test_the_last_record_of_each_key_wins_as_compaction_keeps_it() -> None:
    found = newest(RECORDS)
    assert [(w["device"], w["metric"], w["mean"]) for w in found] == [
        ("edge-1", "humidity", 50.0),
        ("edge-1", "temperature", 21.5),
        ("edge-10", "temperature", 30.0),
    ]


def test_one_device_is_matched_by_its_whole_name() -> None:
    assert {w["device"] for w in newest(RECORDS, "edge-1")} == {"edge-1"}, "not edge-10"
    assert newest(RECORDS, "edge-7") == []


def test_a_tombstone_removes_its_key() -> None:
    found = newest([*RECORDS, record(None, "edge-10/bme280/temperature")])
    assert "edge-10" not in {w["device"] for w in found}


def test_the_table_has_a_line_per_series_with_its_window_in_utc() -> None:
    lines = table(newest(RECORDS, "edge-1")).splitlines()
    assert lines[0].split() == [
        "device",
        "sensor",
        "metric",
        "window",
        "(UTC)",
        "count",
        "min",
        "mean",
        "max",
        "unit",
    ]
    assert lines[2].split() == [
        "edge-1",
        "bme280",
        "temperature",
        "2027-01-15",
        "08:01:00-08:02:00",
        "12",
        "20.5",
        "21.5",
        "22.5",
        "C",
    ]
