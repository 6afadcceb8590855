"""The agent's own metrics, in Prometheus text format on a local port."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from edge_agent.release import VERSION


@dataclass
class Metrics:
    taken: int = 0
    spooled: int = 0
    sent: int = 0
    send_errors: int = 0
    clock_unsynchronised: int = 0
    last_success: float = 0.0
    started: float = field(default_factory=time.time)
    sensor_errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # depth, bytes, and readings lost or refused by reason (Spool.counters)
    spool_state: Callable[[], tuple[int, int, dict[str, int]]] = lambda: (0, 0, {})
    sensors_stalled: Callable[[], dict[str, int]] = lambda: {}  # sensor -> 1 while its read is overdue

    def render(self) -> str:
        depth, size, lost = self.spool_state()
        samples: list[tuple[str, str, float]] = [
            ("edge_agent_build_info", f'version="{VERSION}"', 1),
            ("edge_agent_start_time_seconds", "", self.started),
            ("edge_agent_readings_taken_total", "", self.taken),
            ("edge_agent_readings_spooled_total", "", self.spooled),
            ("edge_agent_readings_sent_total", "", self.sent),
            *_labelled("edge_agent_readings_dropped_total", "reason", lost),
            ("edge_agent_send_errors_total", "", self.send_errors),
            *_labelled("edge_agent_sensor_errors_total", "sensor", self.sensor_errors),
            *_labelled("edge_agent_sensor_stalled", "sensor", self.sensors_stalled()),
            ("edge_agent_clock_unsynchronised", "", self.clock_unsynchronised),
            ("edge_agent_spool_depth", "", depth),
            ("edge_agent_spool_bytes", "", size),
            ("edge_agent_last_success_timestamp_seconds", "", self.last_success),
        ]
        lines: list[str] = []
        for name, labels, value in samples:
            if not any(line.startswith(f"# TYPE {name} ") for line in lines):
                kind, doc = _FAMILIES[name]
                lines.extend([f"# HELP {name} {doc}", f"# TYPE {name} {kind}"])
            lines.append(f"{name}{{{labels}}} {value}" if labels else f"{name} {value}")
        return "\n".join(lines) + "\n"


def _labelled(name: str, label: str, counts: dict[str, int]) -> list[tuple[str, str, float]]:
    return [(name, f'{label}="{key}"', value) for key, value in sorted(counts.items())]


_FAMILIES = {
    "edge_agent_build_info": ("gauge", "The running agent's release (label version); always 1."),
    "edge_agent_start_time_seconds": ("gauge", "When this agent process started (Unix time)."),
    "edge_agent_readings_taken_total": ("counter", "Readings taken from sensors."),
    "edge_agent_readings_spooled_total": ("counter", "Readings written to the spool."),
    "edge_agent_readings_sent_total": ("counter", "Readings acknowledged by Kafka."),
    "edge_agent_readings_dropped_total": (
        "counter",
        "Readings lost or refused: oldest (bound), refused (stop_sampling), disk_full, damaged.",
    ),
    "edge_agent_send_errors_total": ("counter", "Failed sends (retried)."),
    "edge_agent_sensor_errors_total": ("counter", "Failed sensor reads (errors, reads over their timeout)."),
    "edge_agent_sensor_stalled": ("gauge", "1 while a sensor's read is overdue (hung)."),
    "edge_agent_clock_unsynchronised": ("gauge", "1 while sampling waits for the clock to be synchronised."),
    "edge_agent_spool_depth": ("gauge", "Readings waiting in the spool."),
    "edge_agent_spool_bytes": ("gauge", "Bytes on disk in the spool."),
    "edge_agent_last_success_timestamp_seconds": ("gauge", "Last acknowledged send."),
}


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
