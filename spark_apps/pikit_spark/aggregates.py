"""sensor_aggregates' outputs of the closed windows (device_windows.py): Kafka records."""

from __future__ import annotations

import json
from typing import Any

from pikit_spark.sink import Record

AGGREGATE_SCHEMA_VERSION = 1
CLOSED_SCHEMA = (
    "device string, sensor string, metric string, unit string, window_start long, window_end long, "
    "count long, min double, max double, mean double, stddev double, date date"
)
_COLUMNS = [part.split()[0] for part in CLOSED_SCHEMA.split(", ")]
_BODY = [c for c in _COLUMNS if c != "date"]


def as_kafka_records(closed: list[dict[str, Any]]) -> list[Record]:
    """Keyed by device (one device's windows stay in order in one partition)."""
    return [
        (
            window["device"].encode(),
            json.dumps(
                {"schema": AGGREGATE_SCHEMA_VERSION, **{c: window[c] for c in _BODY}}, separators=(",", ":")
            ).encode(),
            [],
        )
        for window in closed
    ]


def as_latest_records(closed: list[dict[str, Any]]) -> list[Record]:
    """The newest of the batch's closed windows for each device x sensor x metric, keyed
    `device/sensor/metric` (no name holds a "/": pikit_contract.readings.NAME_PATTERN), for the
    compacted latest topic, where the last record of each key stays: one small topic answers
    "what does this device read now" without reading the history."""
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for window in closed:
        series = (window["device"], window["sensor"], window["metric"])
        if series not in newest or window["window_start"] > newest[series]["window_start"]:
            newest[series] = window
    keys = sorted(newest)
    bodies = as_kafka_records([newest[series] for series in keys])
    return [
        ("/".join(series).encode(), value, headers)
        for series, (_, value, headers) in zip(keys, bodies, strict=True)
    ]
