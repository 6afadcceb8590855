"""`pikit status` reads each node's OS release from its node exporter."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pikit.status import os_release

# What Debian 13's prometheus-node-exporter serves (its os collector), trimmed.
EXPOSITION = b"".join(
    [
        b"# TYPE node_os_info gauge\n",
        b'node_os_info{build_id="",id="debian",id_like="",name="Debian GNU/Linux",',
        b'pretty_name="Debian GNU/Linux 13 (trixie)",variant="",version="13 (trixie)",',
        b'version_codename="trixie",version_id="13"} 1\n',
        b'node_os_version{id="debian",id_like="",name="Debian GNU/Linux"} 13\n',
    ]
)


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(EXPOSITION)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def test_the_release_comes_from_node_os_info(exporter: int) -> None:
    release = os_release("127.0.0.1", exporter)
    assert release is not None
    assert release["pretty_name"] == "Debian GNU/Linux 13 (trixie)"
    assert (release["version_id"], release["version_codename"]) == ("13", "trixie")


def test_a_node_whose_exporter_does_not_answer_has_no_release() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert os_release("127.0.0.1", port, timeout=1.0) is None
