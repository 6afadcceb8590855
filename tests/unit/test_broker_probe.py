"""The bootstrap probe (pikit_contract.brokers): which brokers a new client starts from when one
of them is dead or hung, and how long finding out takes."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from pikit_contract.brokers import PROBE_GRACE_S, answering


def _answer_api_versions(server: socket.socket) -> None:
    """A broker as far as the probe looks: it reads the request and answers its correlation id."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            size = struct.unpack(">i", conn.recv(4))[0]
            request = b""
            while len(request) < size:
                request += conn.recv(size - len(request))
            correlation_id = struct.unpack(">i", request[4:8])[0]
            conn.sendall(struct.pack(">ii", 4, correlation_id))


@pytest.fixture
def live() -> Iterator[str]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        threading.Thread(target=_answer_api_versions, args=(server,), daemon=True).start()
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def hung() -> Iterator[str]:
    """A frozen broker: its kernel accepts the connection, and nothing ever answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"127.0.0.1:{server.getsockname()[1]}"


def test_a_hung_broker_costs_the_grace_not_the_timeout(live: str, hung: str) -> None:
    started = time.monotonic()
    assert answering({"bootstrap_servers": [hung, live]}, timeout=10) == [live]
    took = time.monotonic() - started
    assert took < PROBE_GRACE_S + 2, f"the probe waited {took:.1f}s on the hung broker"


def test_every_broker_that_answers_is_kept_in_its_order(live: str, hung: str) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(8)
        threading.Thread(target=_answer_api_versions, args=(other,), daemon=True).start()
        second = f"127.0.0.1:{other.getsockname()[1]}"
        assert answering({"bootstrap_servers": [second, hung, live]}, timeout=5) == [second, live]


def test_none_answering_takes_the_timeout_and_finds_none(hung: str) -> None:
    started = time.monotonic()
    assert answering({"bootstrap_servers": [hung]}, timeout=1) == []
    assert 0.9 < time.monotonic() - started < 3
