"""The driver's watchdog: systemd hears from it while a query moves, and not after a stall."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from pikit_contract.watchdog import Watchdog, alive, notify
from pikit_spark.metrics import AppMetrics


@pytest.fixture
def systemd(tmp_path: Path) -> socket.socket:
    """A datagram socket where systemd would listen (NOTIFY_SOCKET)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(0.5)
    return sock


def heard(sock: socket.socket) -> list[bytes]:
    messages = []
    try:
        while True:
            messages.append(sock.recv(256))
    except TimeoutError:
        return messages


def test_a_query_that_moved_within_the_stall_is_alive() -> None:
    assert alive(now=1000.0, last_sign=941.0, stall_after=60)
    assert not alive(now=1000.0, last_sign=940.0, stall_after=60)


def test_it_pets_while_alive_and_stops_once_stalled(
    systemd: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    address = systemd.getsockname()
    sign = [0.0]
    dog = Watchdog(lambda: sign[0], stall_after=60, interval=1, address=address)
    sign[0] = time.time() - 10
    assert dog.beat() and dog.beat()
    assert heard(systemd) == [b"WATCHDOG=1", b"WATCHDOG=1"]
    sign[0] -= 100  # the query's last sign of life is now 110 s old
    with caplog.at_level(logging.ERROR, logger="pikit.watchdog"):
        assert not dog.beat() and not dog.beat()
    assert heard(systemd) == [], "systemd hears nothing once the query stalled"
    assert len([r for r in caplog.records if "no sign of work for" in r.message]) == 1, "said once"
    sign[0] += 200
    assert dog.beat() and heard(systemd) == [b"WATCHDOG=1"]


def test_only_a_unit_with_a_watchdog_gets_one(
    monkeypatch: pytest.MonkeyPatch, systemd: socket.socket
) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.setenv("NOTIFY_SOCKET", systemd.getsockname())
    assert Watchdog.for_unit(lambda: 0.0, stall_after=300) is None
    monkeypatch.setenv("WATCHDOG_USEC", "60000000")
    dog = Watchdog.for_unit(lambda: 0.0, stall_after=300)
    assert dog is not None and dog.interval == 20
    assert Watchdog.for_unit(lambda: 0.0, stall_after=0) is None, "--stall-after-seconds 0: never stops"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not notify("WATCHDOG=1")


def test_the_metrics_listener_keeps_each_querys_last_sign_of_life(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("pikit_spark.metrics.time.time", lambda: clock[0])
    metrics = AppMetrics("app")
    assert metrics.last_sign() == 1000.0, "the app's start, before any query"
    clock[0] = 1010.0
    metrics.onQueryStarted(SimpleNamespace(id="q1"))
    metrics.onQueryStarted(SimpleNamespace(id="q2"))
    clock[0] = 1050.0
    metrics.onQueryIdle(SimpleNamespace(id="q1"))
    assert metrics.last_sign() == 1010.0, "the least recently alive query: q2"
    clock[0] = 1060.0
    metrics.onQueryIdle(SimpleNamespace(id="q2"))
    assert metrics.last_sign() == 1050.0
