"""The state's changelog records (pikit_spark/changelog.py): a device's document changes only when
its rows do, whatever order the fold gave them, and a table without a device column is refused."""

from __future__ import annotations

import json

import pytest
from pikit_spark.anomalies import STATE_SCHEMAS as ALERT_SCHEMAS
from pikit_spark.changelog import changes, device_tables, documents
from pikit_spark.device_windows import STATE_SCHEMAS as WINDOW_SCHEMAS
from pikit_spark.state import Tables

BEFORE: Tables = {
    "windows": [
        ("a", "s", "t", "C", 60, 2, 1.0, 0.0, 1.0, 1.0),
        ("a", "s", "h", "%", 60, 2, 5.0, 0.0, 5.0, 5.0),
    ],
    "devices": [("a", 4, 100.0, 0), ("b", 7, 90.0, 0)],
}


def test_an_unchanged_device_writes_nothing_whatever_the_rows_order() -> None:
    shuffled = {name: list(reversed(rows)) for name, rows in BEFORE.items()}
    assert changes(BEFORE, shuffled) == []


def test_a_changed_device_gets_its_whole_document_and_a_gone_one_a_tombstone() -> None:
    after: Tables = {"windows": BEFORE["windows"][:1], "devices": [("a", 5, 101.0, 0)]}
    records = {key: value for key, value, _ in changes(BEFORE, after)}
    assert set(records) == {b"a", b"b"}
    assert records[b"b"] is None
    assert json.loads(records[b"a"] or b"") == {
        "devices": [["a", 5, 101.0, 0]],
        "windows": [["a", "s", "t", "C", 60, 2, 1.0, 0.0, 1.0, 1.0]],
    }


def test_documents_group_every_table_by_device() -> None:
    assert sorted(documents(BEFORE)) == ["a", "b"]
    assert documents(BEFORE)["b"] == {"devices": [["b", 7, 90.0, 0]]}


def test_both_apps_state_is_keyed_by_device_and_other_tables_are_refused() -> None:
    device_tables(WINDOW_SCHEMAS)
    device_tables(ALERT_SCHEMAS)
    with pytest.raises(ValueError, match="parquet_copied"):
        device_tables({"parquet_copied": "at double"})
