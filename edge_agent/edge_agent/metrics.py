"""The agent's own metrics, in Prometheus text format on a local port."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Metrics:
    taken: int = 0
    spooled: int = 0
    sent: int = 0
    send_errors: int = 0
    clock_unsynchronised: int = 0
    last_success: float = 0.0
    sensor_errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # depth, bytes, and readings lost or refused by reason (Spool.counters)
    spool_state: Callable[[], tuple[int, int, dict[str, int]]] = lambda: (0, 0, {})

    def render(self) -> str:
        depth, size, lost = self.spool_state()
        lines: list[str] = []

        def metric(name: str, kind: str, doc: str, value: float, labels: str = "") -> None:
            if not any(line.startswith(f"# TYPE {name} ") for line in lines):
                lines.extend([f"# HELP {name} {doc}", f"# TYPE {name} {kind}"])
            lines.append(f"{name}{labels} {value}")

        metric("edge_agent_readings_taken_total", "counter", "Readings taken from sensors.", self.taken)
        metric("edge_agent_readings_spooled_total", "counter", "Readings written to the spool.", self.spooled)
        metric("edge_agent_readings_sent_total", "counter", "Readings acknowledged by Kafka.", self.sent)
        for reason, count in lost.items():
            metric("edge_agent_readings_dropped_total", "counter",
                   "Readings lost or refused: oldest (bound), refused (stop_sampling), disk_full, damaged.",
                   count, f'{{reason="{reason}"}}')  # fmt: skip
        metric("edge_agent_send_errors_total", "counter", "Failed sends (retried).", self.send_errors)
        for sensor, count in sorted(self.sensor_errors.items()):
            metric(
                "edge_agent_sensor_errors_total",
                "counter",
                "Failed sensor reads.",
                count,
                f'{{sensor="{sensor}"}}',
            )
        metric("edge_agent_clock_unsynchronised", "gauge",
               "1 while sampling waits for the clock to be synchronised.",
               self.clock_unsynchronised)  # fmt: skip
        metric("edge_agent_spool_depth", "gauge", "Readings waiting in the spool.", depth)
        metric("edge_agent_spool_bytes", "gauge", "Bytes on disk in the spool.", size)
        metric(
            "edge_agent_last_success_timestamp_seconds", "gauge", "Last acknowledged send.", self.last_success
        )
        return "\n".join(lines) + "\n"


def serve(metrics: Metrics, listen: str) -> ThreadingHTTPServer:
    host, _, port = listen.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = metrics.render().encode()
            self.send_response(200 if self.path in ("/", "/metrics") else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
