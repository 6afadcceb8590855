"""The Sender's rounds against a link of our own: what leaves the spool, and when."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from edge_agent.metrics import Metrics
from edge_agent.sender import ROUNDS_IN_FLIGHT, Sender
from edge_agent.spool import Record, Spool

from edge_agent import sender as sender_module


class Link:
    """Acknowledges what it is told to; fails the submits it is told to fail."""

    def __init__(self, failures: int = 0, acknowledge: bool = True) -> None:
        self.failures, self.acknowledge = failures, acknowledge
        self.sent: list[list[int]] = []
        self.closed = 0

    def submit(self, records: list[Record]) -> list[int]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker away")
        self.sent.append([r.seq for r in records])
        return self.sent[-1]

    def acknowledged(self, sent: Any, give_up: Callable[[], bool]) -> bool:
        while not self.acknowledge:
            if give_up():
                return False
            time.sleep(0.01)
        return True

    def close(self, timeout: float) -> None:
        self.closed += 1


def spool_of(tmp_path: Path, n: int) -> Spool:
    spool = Spool(tmp_path / "spool", max_bytes=1 << 24, segment_bytes=1 << 20, fsync="never")
    for seq in range(n):
        spool.append(seq, b'{"seq":%d}' % seq)
    return spool


def drain(spool: Spool, link: Link, seconds: float = 0.0) -> Metrics:
    metrics, stop = Metrics(), threading.Event()
    stop.set()  # drain what is there, for at most `seconds` more
    Sender(spool, metrics, threading.Event(), link, readings_per_record=2).run(
        stop, [time.monotonic() + seconds]
    )
    return metrics


def test_every_reading_leaves_the_spool_once_in_order_after_its_acknowledgement(tmp_path: Path) -> None:
    spool = spool_of(tmp_path, 1000)
    link = Link()
    metrics = drain(spool, link, seconds=10)
    assert [seq for sent in link.sent for seq in sent] == list(range(1000))
    assert max(len(sent) for sent in link.sent) == 2 * sender_module.RECORDS_PER_ROUND
    assert spool.depth == 0 and metrics.sent == 1000


def test_a_failed_link_backs_off_and_resends_from_the_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sender_module, "backoff", lambda failures: 0.0)
    spool = spool_of(tmp_path, 300)
    link = Link(failures=3)
    metrics = drain(spool, link, seconds=10)
    assert [seq for sent in link.sent for seq in sent] == list(range(300))
    assert metrics.send_errors == 3 and link.closed >= 3 and spool.depth == 0


def test_unacknowledged_rounds_stay_in_the_spool_when_the_drain_time_ends(tmp_path: Path) -> None:
    spool = spool_of(tmp_path, 1000)
    link = Link(acknowledge=False)
    metrics = drain(spool, link, seconds=0.2)
    assert len(link.sent) == ROUNDS_IN_FLIGHT, "rounds are pipelined up to the limit, no further"
    assert spool.depth == 1000 and metrics.sent == 0


def test_the_loop_shows_life_while_it_waits_and_not_once_it_hangs(tmp_path: Path) -> None:
    """What the agent's watchdog reads: a wait for an acknowledgement (the brokers away) keeps
    the loop's last turn fresh; a link that hangs inside a call lets it grow old."""
    spool = spool_of(tmp_path, 10)
    hang, hung = threading.Event(), threading.Event()

    class Hanging(Link):
        def submit(self, records: list[Record]) -> list[int]:
            if hang.is_set():
                hung.set()
                threading.Event().wait()  # a call without a bound
            return super().submit(records)

    link = Hanging(acknowledge=False)
    stop = threading.Event()
    sender = Sender(spool, Metrics(), threading.Event(), link, readings_per_record=2)
    threading.Thread(target=sender.run, args=(stop, [float("inf")]), daemon=True).start()
    time.sleep(0.5)
    assert time.time() - sender.last_turn < 0.2, "waiting on an acknowledgement is life"
    hang.set()
    link.acknowledge = True  # the round goes, and the next submit hangs
    spool.append(10, b'{"seq":10}')
    # Timed from the hang itself: on a loaded machine the loop took 0.23 s to get there.
    assert hung.wait(10), "the loop reached the hanging call"
    time.sleep(0.5)
    assert time.time() - sender.last_turn >= 0.4, "a hung call is not"
