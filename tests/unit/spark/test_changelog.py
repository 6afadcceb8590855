"""The state's changelog records (pikit_spark/changelog.py): a device's document changes only when
its rows do, whatever order the fold gave them, and a table without a device column is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka import TopicPartition
from pikit_spark.anomalies import STATE_SCHEMAS as ALERT_SCHEMAS
from pikit_spark.changelog import KafkaState, changes, device_tables, documents
from pikit_spark.device_windows import STATE_SCHEMAS as WINDOW_SCHEMAS
from pikit_spark.sink import batch_end_offsets, starting_offsets
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


def test_a_resumed_query_starts_at_the_committed_offsets_and_earliest_elsewhere() -> None:
    committed = {TopicPartition("r", 0): 120, TopicPartition("r", 2): 0, TopicPartition("r", 3): -1}
    assert json.loads(starting_offsets("r", range(4), committed)) == {
        "r": {"0": 120, "1": -2, "2": 0, "3": -2}
    }


def test_a_batch_commits_the_offsets_its_offset_log_says_it_reads_to(tmp_path: Path) -> None:
    # Spark's offset log: a version line, the batch's metadata, one line per source.
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "7").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1800000000000}\n{"r":{"1":40,"0":35}}\n'
    )
    assert batch_end_offsets(str(tmp_path), 7) == {TopicPartition("r", 0): 35, TopicPartition("r", 1): 40}


def test_a_state_is_committed_only_after_its_changes_were_sent() -> None:
    state = KafkaState("state", WINDOW_SCHEMAS, {"bootstrap_servers": ["k:9093"]})
    with pytest.raises(RuntimeError, match="without changes_to"):
        state.committed()
