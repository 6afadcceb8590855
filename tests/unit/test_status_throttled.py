"""`pikit status` names a device the brokers throttle for producing past its quota, from the
brokers' exporters (kafka_user_produce_throttle_time_seconds, roles/kafka/files/jmx-exporter.yml)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pikit.site import Site
from pikit.site_model import site_model
from pikit.status import throttled_devices

PAGES = {
    # Two brokers: edge-1 leads on one and is delayed there; edge-2 is within its quota on both.
    "127.0.0.1": b'kafka_user_produce_throttle_time_seconds{user="edge-1"} 0.0\n'
    b'kafka_user_produce_throttle_time_seconds{user="edge-2"} 0.0\n',
    "127.0.0.2": b'kafka_user_produce_throttle_time_seconds{user="edge-1"} 2.5\n'
    b'kafka_user_produce_bytes_per_second{user="edge-1"} 16390.0\n'
    b'kafka_user_produce_throttle_time_seconds{user="edge-2"} 0.0\n',
}


class _Broker(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGES[self.server.server_address[0]]  # type: ignore[index]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    first = ThreadingHTTPServer(("127.0.0.1", 0), _Broker)
    port = first.server_address[1]
    servers = [first, ThreadingHTTPServer(("127.0.0.2", port), _Broker)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield port
    for server in servers:
        server.shutdown()


def test_the_device_a_broker_delays_is_named_with_its_longest_delay(port: int) -> None:
    told = {"_kafka_site": {"services": {"kafka-metrics": port}}}
    hostvars = {
        "b1": {"ansible_host": "127.0.0.1", **told},
        "b2": {"ansible_host": "127.0.0.2", **told},
        "b3": {"ansible_host": "127.0.0.3", **told},  # down: says nothing
    }
    model = site_model({"kafka_broker": ["b1", "b2", "b3"]}, hostvars)
    site = Site(Path("hosts.yml"), {}, model)
    assert throttled_devices(site) == {"edge-1": 2.5}
