"""A running app picks up a rewritten keyring (a device revoked, restored or joined) between two
micro-batches, by restarting its query, not the app; its checkpoint carries the stream on."""

from __future__ import annotations

import argparse
import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pikit_contract.signing import Keyring
from pikit_spark import app as app_module
from pikit_spark.app import StreamingApp
from pikit_spark.changelog import KafkaState
from pikit_spark.common import KeyringFile
from pikit_spark.metrics import AppMetrics
from pyspark.sql import DataFrame, SparkSession


class _Sink:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_a_rewritten_keyring_restarts_the_query_and_the_stream_goes_on(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app_module, "KEYRING_POLL_S", 0.5)
    path = tmp_path / "app.device-keys.json"
    path.write_text(Keyring({"edge-1": b"\x01" * 32}).to_json())
    sink = _Sink()
    args = argparse.Namespace(trigger="500 milliseconds")
    metrics = AppMetrics("keyring-test")
    keyring = KeyringFile(str(path))
    state = KafkaState("unused", {}, {})  # the test's batches keep no state
    query_dir = str(tmp_path / "stream")
    app = StreamingApp(
        "keyring-test",
        "keyring-test",
        args,
        spark,
        sink,  # type: ignore[arg-type]
        state,
        str(tmp_path),
        query_dir,
        "",
        keyring,
        metrics,
    )
    planned: list[Keyring | None] = []
    batches: list[tuple[int, int]] = []  # (query generation, batch id)

    def frame(keyring: Keyring | None) -> DataFrame:
        planned.append(keyring)
        return spark.readStream.format("rate").option("rowsPerSecond", 5).load()

    def process(batch: DataFrame, batch_id: int) -> None:
        batches.append((len(planned), batch_id))

    runner = threading.Thread(target=app.run, args=(frame, process, "test"), daemon=True)
    runner.start()
    _until(lambda: len(batches) >= 2, "the first query's batches")
    first_sha1 = hashlib.sha1(path.read_bytes()).hexdigest()
    assert f'pikit_app_keyring_info{{app="keyring-test",sha1="{first_sha1}"}} 1' in metrics.exposition()
    path.write_text(Keyring({"edge-1": b"\x01" * 32}, {"edge-1": {0: 3}}).to_json())
    _until(lambda: any(generation == 2 for generation, _ in batches), "a batch of the second query")
    second_sha1 = hashlib.sha1(path.read_bytes()).hexdigest()
    shown = metrics.exposition()
    assert f'sha1="{second_sha1}"' in shown and 'pikit_app_revoked_devices{app="keyring-test"} 1' in shown
    # A file that does not read is not taken: the query goes on with the keyring it holds.
    path.write_text('{"keys": {"edge-1": "not hex"}}')
    time.sleep(4 * app_module.KEYRING_POLL_S)
    assert len(planned) == 2 and f'sha1="{second_sha1}"' in metrics.exposition()
    [query] = spark.streams.active
    query.stop()
    runner.join(timeout=60)
    assert not runner.is_alive() and sink.closed
    assert [ring.revoked if ring else None for ring in planned] == [{}, {"edge-1": {0: 3}}]
    # The checkpoint carries on: the second query's first batch follows the first query's last.
    first = [b for g, b in batches if g == 1]
    second = [b for g, b in batches if g == 2]
    assert second[0] in (first[-1] + 1, first[-1]), batches  # the same id when a stop cut one short


def _until(done: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f}s"
        time.sleep(0.2)


def test_a_query_that_falls_behind_takes_a_new_keyring_mid_batch(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch outlasts the trigger, so the query is never between two batches: the new keyring
    still reaches it within KEYRING_WAIT_S, the batch under way stopped and read again."""
    monkeypatch.setattr(app_module, "KEYRING_POLL_S", 0.5)
    monkeypatch.setattr(app_module, "KEYRING_WAIT_S", 2)
    path = tmp_path / "app.device-keys.json"
    path.write_text(Keyring({"edge-1": b"\x01" * 32}).to_json())
    args = argparse.Namespace(trigger="200 milliseconds")
    app = StreamingApp(
        "behind",
        "behind",
        args,
        spark,
        _Sink(),  # type: ignore[arg-type]
        KafkaState("unused", {}, {}),
        str(tmp_path),
        str(tmp_path / "stream"),
        "",
        KeyringFile(str(path)),
        AppMetrics("behind"),
    )
    planned: list[Keyring | None] = []
    started: list[int] = []

    def frame(keyring: Keyring | None) -> DataFrame:
        planned.append(keyring)
        return spark.readStream.format("rate").option("rowsPerSecond", 5).load()

    def process(batch: DataFrame, batch_id: int) -> None:
        started.append(len(planned))
        time.sleep(3)  # longer than the trigger: the next batch is due when this one ends

    runner = threading.Thread(target=app.run, args=(frame, process, "test"), daemon=True)
    runner.start()
    _until(lambda: started, "the first batch")
    path.write_text(Keyring({"edge-1": b"\x01" * 32}, {"edge-1": {0: 3}}).to_json())
    changed = time.monotonic()
    _until(lambda: len(planned) == 2, "the query planned with the new keyring", timeout=30)
    took = time.monotonic() - changed
    # Planned is not yet started: the query is active a moment after its plan.
    _until(lambda: len(spark.streams.active) == 1, "the query with the new keyring running")
    [query] = spark.streams.active
    query.stop()
    runner.join(timeout=60)
    assert planned[1] is not None and planned[1].revoked == {"edge-1": {0: 3}}
    assert took < app_module.KEYRING_WAIT_S + 2 * app_module.KEYRING_POLL_S + 3, took
