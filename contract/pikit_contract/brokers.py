"""Which bootstrap brokers answer now, found within a bound. Shared by the Spark drivers' sink
(the apps' bundle ships this package) and the edge agent: both make kafka-python clients.

kafka-python 3.0 bootstraps a new client from one of its `bootstrap_servers`, and waits on
that broker's TLS handshake without a bound. A broker that hangs (SIGSTOP, a stalled SD card)
still accepts TCP connections in its kernel, and then never answers: a producer made during
such a freeze waited the whole freeze (90 s) in its constructor (issue 31). So a new client
bootstraps only from brokers that answered an ApiVersions request within a few seconds.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

from kafka.errors import KafkaTimeoutError

API_VERSIONS = 18
Probe = Callable[[dict[str, Any], float], list[str]]
PROBE_TIMEOUT_S = 5.0  # a broker that has not answered ApiVersions by then is left out
# Once one broker has answered, the others get this much longer. A client needs only one to
# bootstrap (the cluster's metadata names the rest), and waiting out a dead Pi's full timeout
# cost every new client 5 s: four of them, 20 s, when a standby driver took an app over.
PROBE_GRACE_S = 0.5
_CLIENT_ID = b"pikit-probe"


def _api_versions_request(correlation_id: int) -> bytes:
    header = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    return struct.pack(">i", len(header)) + header


def _tls(client: dict[str, Any]) -> ssl.SSLContext | None:
    if client.get("security_protocol", "PLAINTEXT").upper() != "SSL":
        return None
    # Liveness only: whether the broker completes a handshake, not who it is (the client that
    # follows verifies it). Our certificate goes along, since the brokers require one.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if client.get("ssl_certfile"):
        context.load_cert_chain(client["ssl_certfile"], client.get("ssl_keyfile"))
    return context


def answers(server: str, context: ssl.SSLContext | None, timeout: float) -> bool:
    """Whether the broker at host:port answers an ApiVersions request within `timeout` s, over
    TLS when a context is given."""
    host, _, port = server.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw:
            raw.settimeout(timeout)  # one bound for each step: handshake, send, receive
            sock = context.wrap_socket(raw) if context else raw
            sock.sendall(_api_versions_request(1))
            size_and_id = b""
            while len(size_and_id) < 8:
                chunk = sock.recv(8 - len(size_and_id))
                if not chunk:
                    return False
                size_and_id += chunk
            _size, correlation_id = struct.unpack(">ii", size_and_id)
            return bool(correlation_id == 1)
    except (OSError, ValueError):
        return False


def answering(client: dict[str, Any], timeout: float, grace: float = PROBE_GRACE_S) -> list[str]:
    """The client's bootstrap servers that answer now, in their order: all asked at once, and
    those not answered within `grace` s of the first answer (or within `timeout`) left out."""
    servers = list(client["bootstrap_servers"])
    context = _tls(client)  # one for all: it loads the client's key and certificate
    pool = ThreadPoolExecutor(max_workers=len(servers) or 1)
    asked = {pool.submit(answers, server, context, timeout): server for server in servers}
    answered: set[str] = set()
    deadline = time.monotonic() + timeout
    pending = set(asked)
    try:
        while pending and (left := deadline - time.monotonic()) > 0:
            done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            found = {asked[future] for future in done if future.result()}
            if found and not answered:
                deadline = min(deadline, time.monotonic() + grace)
            answered |= found
    finally:
        # A probe still waiting on a dead host ends by its own socket timeout, in the background.
        pool.shutdown(wait=False, cancel_futures=True)
    return [server for server in servers if server in answered]


def bootstrap_servers(client: dict[str, Any], probe: Probe = answering) -> list[str]:
    """What a new client bootstraps from: the servers that answer within PROBE_TIMEOUT_S. None
    answering raises `KafkaTimeoutError`, which the sink's retries and the agent's sender treat
    as a failed attempt."""
    answered = probe(client, PROBE_TIMEOUT_S)
    if not answered:
        raise KafkaTimeoutError(f"no broker of {client['bootstrap_servers']} answers")
    return answered
