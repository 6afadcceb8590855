"""The Spark apps' exactly-once Kafka sink against a real broker: replays, zombies, restarts,
a driver killed at each step of a commit, broker outages and a deleted checkpoint."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka.errors import KafkaError
from pikit_contract.brokers import PROBE_TIMEOUT_S, answering
from pikit_contract.failpoints import SINK_AFTER_COMMIT, SINK_BEFORE_COMMIT, SINK_POINTS
from pikit_spark.sink import BoundedProducer, LineageError, Record, TransactionalSink
from pikit_testkit.broker import LocalBroker, new_topic

from pikit.topic import read_to_end


def _batch(batch_id: int, n: int = 3) -> list[Record]:
    return [(f"dev-{i % 2}".encode(), f"{batch_id}:{i}".encode(), [("reason", b"why")]) for i in range(n)]


def _values(topic: str, client: dict[str, Any], expected: list[bytes], timeout: float = 30) -> list[bytes]:
    """The topic's committed values, sorted, once they are `expected` or the timeout passed. A commit
    returns once the coordinator logged it; the markers that make its records readable (read_committed)
    reach the partitions after that: CI read one batch short right after a commit."""
    deadline = time.monotonic() + timeout
    while True:
        values = sorted(r.value for r in read_to_end(topic, **client))
        if values == expected or time.monotonic() > deadline:
            return values
        time.sleep(0.5)


def wait_until_stopped(pid: int, timeout: float = 5) -> None:
    """SIGSTOP is delivered asynchronously: wait until every thread of the process is stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {
            (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            for task in Path(f"/proc/{pid}/task").iterdir()
        }
        if states <= {"T", "t"}:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} not stopped in {timeout:.0f}s")


def test_each_batch_lands_once_across_replays_zombies_and_restarts(broker: str) -> None:
    topic = new_topic(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}

    sink = TransactionalSink([topic], "test-app", client)
    assert sink.written_through() == -1
    assert sink.write(0, {topic: _batch(0)}) == 3
    assert sink.write(0, {topic: _batch(0)}) is None, "a replayed batch is skipped"
    assert sink.write(1, {topic: _batch(1)}) == 3

    # The driver dies with batch 2 half sent: its transaction is open, never committed.
    zombie = sink.producer()
    zombie.begin_transaction()
    zombie.send(topic, key=b"dev-0", value=b"2:half")
    zombie.flush()

    # The restarted driver replays batch 1 (skipped) and writes batch 2 in full.
    restarted = TransactionalSink([topic], "test-app", client)
    assert restarted.write(1, {topic: _batch(1)}) is None
    assert restarted.write(2, {topic: _batch(2)}) == 3
    assert restarted.written_through() == 2
    restarted.close()
    with pytest.raises(KafkaError):  # the old driver, were it still alive, is fenced off
        zombie.send(topic, key=b"dev-0", value=b"2:late")
        zombie.commit_transaction()

    records = read_to_end(topic, **client)
    values = sorted(r.value for r in records)
    assert values == sorted(f"{b}:{i}".encode() for b in range(3) for i in range(3))
    assert all(r.headers == [("reason", b"why")] for r in records)
    assert {r.key for r in records} == {b"dev-0", b"dev-1"}


# A driver that writes batch 1 with the sink's failpoints in argv[4]; killed -9 where one is armed.
_DRIVER = """
import sys
from pikit_spark.sink import TransactionalSink
broker, topic, name, failpoints = sys.argv[1:5]
sink = TransactionalSink([topic], name, {"bootstrap_servers": [broker]}, failpoints=failpoints)
sink.write(1, {topic: [(f"dev-{i % 2}".encode(), f"1:{i}".encode(), [("reason", b"why")]) for i in range(3)]})
"""


@pytest.mark.parametrize("point", SINK_POINTS)
def test_a_driver_killed_at_each_step_of_a_commit_leaves_its_batch_to_land_once(
    broker: str, tmp_path: Path, point: str
) -> None:
    """Killed with the records sent, with the offsets in the transaction, or with the commit
    done: the restarted driver's producer aborts what was left open, and the replayed batch
    is written once (or skipped, when its commit had landed)."""
    topic = new_topic(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}
    name = f"killed-{point}"
    first = TransactionalSink([topic], name, client)
    assert first.write(0, {topic: _batch(0)}) == 3
    first.close()
    (tmp_path / "failpoints").mkdir()
    (tmp_path / "failpoints" / point).touch()
    # A session of its own: the failpoint kills its whole process group, as the driver's would.
    driver = subprocess.run(
        [sys.executable, "-c", _DRIVER, broker, topic, name, str(tmp_path)],
        start_new_session=True,
        timeout=120,
        check=False,
    )
    assert driver.returncode == -signal.SIGKILL, "the failpoint fired"
    restarted = TransactionalSink([topic], name, client)
    assert restarted.write(1, {topic: _batch(1)}) == (None if point == SINK_AFTER_COMMIT else 3)
    restarted.close()
    expected = sorted(f"{b}:{i}".encode() for b in range(2) for i in range(3))
    assert _values(topic, client, expected) == expected


def test_one_transaction_spans_every_output_topic(broker: str) -> None:
    windows, late = new_topic(broker), new_topic(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}
    sink = TransactionalSink([windows, late], "two-topics", client)
    assert sink.write(0, {windows: _batch(0, 2), late: _batch(0, 1)}) == 3
    assert sink.write(0, {windows: _batch(0, 2), late: _batch(0, 1)}) is None
    sink.close()
    expected = [b"0:0", b"0:1"]
    assert _values(windows, client, expected) == expected
    expected = [b"0:0"]
    assert _values(late, client, expected) == expected


def test_sinks_of_different_apps_do_not_share_a_marker(broker: str) -> None:
    topic = new_topic(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}
    first, second = TransactionalSink([topic], "app-a", client), TransactionalSink([topic], "app-b", client)
    assert first.write(5, {topic: _batch(5, 1)}) == 1
    assert second.write(5, {topic: _batch(5, 1)}) == 1
    first.close()
    second.close()
    assert len(read_to_end(topic, **client)) == 2


def test_a_batch_whose_sends_expire_in_an_outage_is_not_committed(own_broker: LocalBroker) -> None:
    """The bug this sink had: records expired while the broker was away, yet the
    transaction and the batch marker committed, so a replay skipped the lost batch."""
    topic = new_topic(own_broker.address)
    client: dict[str, Any] = {"bootstrap_servers": [own_broker.address]}
    sink = TransactionalSink([topic], "outage", client, retry_for=0, delivery_timeout_ms=4000)
    assert sink.write(0, {topic: _batch(0)}) == 3

    own_broker.stop()
    with pytest.raises(KafkaError):
        sink.write(1, {topic: _batch(1)})
    own_broker.start()

    replay = TransactionalSink([topic], "outage", client)
    assert replay.written_through() == 0, "the failed batch must not be marked as written"
    assert replay.write(1, {topic: _batch(1)}) == 3, "Spark's replay of the batch is written"
    replay.close()
    expected = sorted(f"{b}:{i}".encode() for b in range(2) for i in range(3))
    assert _values(topic, client, expected) == expected


def test_a_batch_rides_out_a_broker_outage_and_lands_once(own_broker: LocalBroker) -> None:
    topic = new_topic(own_broker.address)
    client: dict[str, Any] = {"bootstrap_servers": [own_broker.address]}
    sink = TransactionalSink([topic], "ride-out", client, retry_for=300, delivery_timeout_ms=4000)
    assert sink.write(0, {topic: _batch(0)}) == 3

    own_broker.stop()
    result: list[int | None] = []
    writer = threading.Thread(target=lambda: result.append(sink.write(1, {topic: _batch(1)})))
    writer.start()
    time.sleep(20)  # several attempts fail meanwhile (4 s delivery timeout, backoff)
    assert writer.is_alive(), "the batch must wait for the broker, not give up or pretend"
    own_broker.start()
    writer.join(timeout=240)
    assert result == [3]
    sink.close()
    expected = sorted(f"{b}:{i}".encode() for b in range(2) for i in range(3))
    assert _values(topic, client, expected) == expected


def test_the_brokers_gone_while_a_commit_is_held_the_batch_lands_once_soon_after(
    own_broker: LocalBroker, tmp_path: Path
) -> None:
    """Issue 31's outage with the commit in flight, made exact by the failpoint: the sink holds
    before its commit, the broker goes away and comes back 30 s later, and the batch is in
    Kafka once within seconds of the broker's return."""
    topic = new_topic(own_broker.address)
    client: dict[str, Any] = {"bootstrap_servers": [own_broker.address]}
    sink = TransactionalSink(
        [topic],
        "held",
        client,
        retry_for=300,
        delivery_timeout_ms=4000,
        call_timeout=5,
        failpoints=str(tmp_path),
    )
    assert sink.write(0, {topic: _batch(0)}) == 3
    (tmp_path / "failpoints").mkdir()
    (tmp_path / "failpoints" / SINK_BEFORE_COMMIT).write_text("hold 5")
    result: list[int | None] = []
    writer = threading.Thread(target=lambda: result.append(sink.write(1, {topic: _batch(1)})))
    writer.start()
    time.sleep(2)
    own_broker.stop()
    time.sleep(30)
    assert writer.is_alive(), "the batch waits for the broker"
    own_broker.start()
    back = time.monotonic()
    writer.join(timeout=120)
    landed = time.monotonic() - back
    print(f"\nbatch {result} {landed:.1f}s after the broker started")
    assert result in ([3], [None])
    assert landed < 60, "the batch goes out within a minute of the broker's return"
    sink.close()
    assert TransactionalSink([topic], "held", client).written_through() == 1
    expected = sorted(f"{b}:{i}".encode() for b in range(2) for i in range(3))
    assert _values(topic, client, expected) == expected


def test_a_deleted_checkpoint_stops_the_sink_until_the_operator_decides(broker: str) -> None:
    topic = new_topic(broker)
    client: dict[str, Any] = {"bootstrap_servers": [broker]}
    old = TransactionalSink([topic], "lineage", client, lineage="query-old")
    assert old.write(0, {topic: _batch(0)}) == 3
    assert old.write(1, {topic: _batch(1)}) == 3
    old.close()

    # The checkpoint was deleted: the new query's batch ids start at 0 again.
    new = TransactionalSink([topic], "lineage", client, lineage="query-new")
    with pytest.raises(LineageError, match=r"batches 0\.\.1 of query query-old"):
        new.write(0, {topic: _batch(10)})
    expected = sorted(f"{b}:{i}".encode() for b in range(2) for i in range(3))
    assert _values(topic, client, expected) == expected

    adopted = TransactionalSink([topic], "lineage", client, lineage="query-new", adopt_new_checkpoint=True)
    assert adopted.write(0, {topic: _batch(10)}) == 3
    adopted.close()
    assert TransactionalSink([topic], "lineage", client, lineage="query-new").marker_state() == (
        0,
        "query-new",
    )


def test_a_commit_in_flight_when_the_broker_hangs_is_bounded_and_the_batch_lands_once(
    own_broker: LocalBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hang of issue 31: the transaction coordinator goes away while a batch's commit is in
    flight. Here the broker is frozen (SIGSTOP) as the commit goes out and thawed 20 s later: the
    commit's wait ends at its bound, the attempt is dropped, and once the broker is back the batch
    is in Kafka exactly once (its commit landed, or it was aborted and sent again) within seconds."""
    topic = new_topic(own_broker.address)
    client: dict[str, Any] = {"bootstrap_servers": [own_broker.address]}
    sink = TransactionalSink([topic], "hang", client, retry_for=300, delivery_timeout_ms=4000, call_timeout=5)
    assert sink.write(0, {topic: _batch(0)}) == 3
    assert own_broker.proc is not None
    pid = own_broker.proc.pid
    frozen: list[float] = []
    thawed: list[float] = []
    timers: list[threading.Timer] = []

    def thaw() -> None:
        # Noted before the signal: once the broker runs, the write may end before this thread
        # runs again (on CI's loaded cores it did, and the test saw a thaw that had not happened).
        thawed.append(time.monotonic())
        os.kill(pid, signal.SIGCONT)

    original = BoundedProducer.commit_within

    def freeze_on_commit(self: BoundedProducer, timeout: float) -> None:
        # Frozen before the commit's request is queued: a broker stopped after it may already
        # have answered (it did on CI's faster machine, and the test froze nothing in flight).
        if not frozen:
            os.kill(pid, signal.SIGSTOP)
            wait_until_stopped(pid)
            frozen.append(time.monotonic())
            timers.append(threading.Timer(20, thaw))
            timers[0].start()
        original(self, timeout)

    monkeypatch.setattr(BoundedProducer, "commit_within", freeze_on_commit)
    try:
        written = sink.write(1, {topic: _batch(1)})
    finally:
        for timer in timers:
            timer.cancel()
        if not thawed:
            os.kill(pid, signal.SIGCONT)
    done = time.monotonic()
    sink.close()
    assert frozen, "the broker was frozen before the commit"
    assert thawed, f"the write ended {done - frozen[0]:.1f}s into the freeze, before the thaw"
    print(f"\nfrozen {thawed[0] - frozen[0]:.0f}s; batch {written=} {done - thawed[0]:.1f}s after the thaw")
    assert written in (3, None), "sent again after an abort, or skipped after a commit that landed"
    assert done - thawed[0] < 30, "the batch goes out within seconds of the broker's return"
    assert TransactionalSink([topic], "hang", client).written_through() == 1
    expected = sorted(f"{b}:{i}".encode() for b in range(2) for i in range(3))
    assert _values(topic, client, expected) == expected


def test_a_hung_broker_is_left_out_of_a_new_producers_bootstrap(broker: str) -> None:
    """A broker SIGSTOPped accepts connections in its kernel and never answers: kafka-python
    would wait on it for as long as it hangs. The sink's producer starts from the others."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)  # the kernel accepts; nobody reads or answers
        client: dict[str, Any] = {"bootstrap_servers": [f"127.0.0.1:{hung.getsockname()[1]}", broker]}
        assert answering(client, timeout=1) == [broker]
        topic = new_topic(broker)
        sink = TransactionalSink([topic], "hung-peer", client, call_timeout=10)
        started = time.monotonic()
        assert sink.write(0, {topic: _batch(0)}) == 3
        assert time.monotonic() - started < PROBE_TIMEOUT_S + 10, "one probe's bound, then a healthy start"
        sink.close()
    expected = sorted(f"0:{i}".encode() for i in range(3))
    assert _values(topic, {"bootstrap_servers": [broker]}, expected) == expected
