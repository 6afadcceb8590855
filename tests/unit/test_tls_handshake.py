"""The kit's kafka-python TLS handshakes give up on a broker that does not answer
(pikit_contract/tls_handshake.py), and still complete with one that does."""

from __future__ import annotations

import inspect
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.errors import KafkaTimeoutError
from kafka.net.selector import NetworkSelector
from kafka.net.transport import KafkaSSLTransport
from pikit_contract.tls_handshake import UNBOUNDED, bound_tls_handshakes
from pikit_testkit.certs import certificate, new_key, pem

BOUND_S = 1.0


@pytest.fixture()
def bounded() -> Iterator[None]:
    before = KafkaSSLTransport.handshake  # another test of the process may have bounded it
    bound_tls_handshakes(BOUND_S)
    yield
    KafkaSSLTransport.handshake = before


def handshake(port: int, context: ssl.SSLContext) -> float:
    """A kafka-python TLS transport's handshake with 127.0.0.1:port, driven to its end: seconds."""
    net = NetworkSelector()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setblocking(False)
    transport = KafkaSSLTransport(net, sock, host="127.0.0.1", ssl_context=context)
    started = time.monotonic()
    try:
        net.run(transport.handshake)
    finally:
        sock.close()
    return time.monotonic() - started


def test_a_broker_that_takes_the_connection_and_never_answers_is_given_up(bounded: None) -> None:
    """A frozen broker's kernel still accepts the TCP connection; the handshake never comes."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            handshake(silent.getsockname()[1], ssl.create_default_context())
        assert BOUND_S <= time.monotonic() - started < BOUND_S + 3


def test_a_broker_that_answers_completes_its_handshake(bounded: None, tmp_path: Path) -> None:
    key, ca_key = new_key(), new_key()
    ca = certificate("ca", ca_key, "ca", ca_key, ca=True)
    (tmp_path / "server.pem").write_bytes(pem(key, certificate("broker", key, "ca", ca_key, ip="127.0.0.1")))
    (tmp_path / "ca.pem").write_bytes(pem(None, ca))
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "server.pem")
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve() -> None:
            conn, _ = listener.accept()
            with server_context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)  # until the client closes

        threading.Thread(target=serve, daemon=True).start()
        client_context = ssl.create_default_context(cafile=tmp_path / "ca.pem")
        assert handshake(listener.getsockname()[1], client_context) < BOUND_S


def test_kafka_pythons_own_handshake_is_still_the_unbounded_one_this_replaces() -> None:
    """An upgrade that bounds it, or changes its loop, shows here: then drop or redo the patch."""
    source = inspect.getsource(UNBOUNDED)
    assert "await self._net.wait_read(self._sock)\n" in source
    assert "timeout" not in source


def test_the_agent_and_the_controllers_tools_bound_their_handshakes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's link to Kafka, the options the Spark drivers' sink and election make clients
    from, and those of `pikit status` and `pikit latest`."""
    from edge_agent.config import parse
    from edge_agent.kafka_link import KafkaLink
    from pikit_spark.common import kafka_python_client

    from pikit.topic import mtls_client
    from tests.unit.edge.test_contract_and_agent import RecordingProducer, _doc

    monkeypatch.setattr(KafkaSSLTransport, "handshake", UNBOUNDED)
    KafkaLink(parse(_doc(tmp_path)), producer_factory=RecordingProducer)
    assert KafkaSSLTransport.handshake is not UNBOUNDED
    monkeypatch.setattr(KafkaSSLTransport, "handshake", UNBOUNDED)
    mtls_client(["127.0.0.1:9093"], tmp_path)
    assert KafkaSSLTransport.handshake is not UNBOUNDED
    monkeypatch.setattr(KafkaSSLTransport, "handshake", UNBOUNDED)
    (tmp_path / "client.properties").write_text("bootstrap.servers=127.0.0.1:9093\n")
    kafka_python_client(str(tmp_path / "client.properties"))
    assert KafkaSSLTransport.handshake is not UNBOUNDED
