"""Each streaming app's own Prometheus endpoint, served by its driver (`--metrics-listen`).

Spark's endpoints know rows and batches; what a site asks of the pipeline is in the app: how far
each query is behind the readings topic, and how many readings went to the late and dead-letter
topics. A listener keeps each query's last progress; the app adds its counts after each batch it
committed. A scrape reads both under one lock.

Offsets are Kafka records, and a device sends several readings per record: "records behind" is
the backlog in records, not in readings.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pikit_contract.readings import SCHEMAS_READ
from pyspark.sql.streaming.listener import StreamingQueryListener

from pikit_spark.common import LOG


def records_behind(end_offset: str | None, latest_offset: str | None) -> dict[str, int]:
    """Per topic, the records between what a batch read up to and the latest offsets Spark saw
    (the Kafka source's JSON, `{"topic": {"partition": offset}}`); {} when either is unknown or
    the source is not Kafka."""
    if not end_offset or not latest_offset:
        return {}
    end, latest = json.loads(end_offset), json.loads(latest_offset)
    if not isinstance(end, dict) or not isinstance(latest, dict):
        return {}
    behind: dict[str, int] = {}
    for topic, partitions in latest.items():
        done = end.get(topic, {})
        if not isinstance(partitions, dict) or not isinstance(done, dict):
            continue
        behind[topic] = sum(max(0, int(last) - int(done.get(p, 0))) for p, last in partitions.items())
    return behind


@dataclass(frozen=True)
class QueryProgress:
    """What the endpoint shows of one query's last micro-batch."""

    query: str
    batch_id: int
    input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    batch_seconds: float
    records_behind: dict[str, int]
    at: float  # when the batch started (epoch seconds)

    @property
    def ended(self) -> float:
        """When the batch ended: what a stall is counted from, since a long batch is no stall
        until it outlasts the bound itself."""
        return self.at + self.batch_seconds

    @classmethod
    def of(cls, progress: Any) -> QueryProgress:
        behind: dict[str, int] = {}
        for source in progress.sources or []:
            for topic, count in records_behind(source.endOffset, source.latestOffset).items():
                behind[topic] = behind.get(topic, 0) + count
        return cls(
            query=progress.name or str(progress.id),
            batch_id=int(progress.batchId),
            input_rows=int(progress.numInputRows or 0),
            input_rows_per_second=float(progress.inputRowsPerSecond or 0.0),
            processed_rows_per_second=float(progress.processedRowsPerSecond or 0.0),
            batch_seconds=(progress.durationMs or {}).get("triggerExecution", 0) / 1000,
            records_behind=behind,
            at=datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp(),
        )


# (name, type, help) of the app-level series; the apps count with these names.
APP_SERIES = {
    "late_readings": ("counter", "readings sent to the late topic"),
    "dead_letters": ("counter", "records or readings sent to the dead-letter topic, with their reason"),
    "alerts": ("counter", "alerts sent to the alerts topic"),
    "windows_closed": ("counter", "device windows closed and written to the aggregates topic"),
    "state_rows": ("gauge", "rows of the app's own state after its last batch"),
    "active": ("gauge", "1 on the app's active driver, 0 on a standby (pikit_spark/leadership.py)"),
}


# What export_latest may export of a window (sensor_aggregates' --latest-gauge): read, and said.
LATEST_STATS: dict[str, tuple[Callable[[dict[str, Any]], float], str]] = {
    "count": (lambda w: w["count"], "readings"),
    "min": (lambda w: w["min"], "the lowest value"),
    "mean": (lambda w: w["mean"], "the mean value"),
    "max": (lambda w: w["max"], "the highest value"),
    "stddev": (lambda w: w["stddev"], "the population standard deviation"),
    "window_end": (lambda w: w["window_end"], "the end (Unix seconds)"),
}


class AppMetrics(StreamingQueryListener):
    """The app's metrics: a StreamingQueryListener for the queries' progress, plus the app's counts."""

    def __init__(self, app: str) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._queries: dict[str, QueryProgress] = {}
        self._values: dict[str, float] = dict.fromkeys(APP_SERIES, 0.0)
        self._devices: dict[str, tuple[float, bool]] = {}
        self._keyring: tuple[str, list[str]] | None = None
        # The newest closed window of each exported series (latest_windows), and what of it.
        self._latest: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._latest_stats: tuple[str, ...] = ()
        self._latest_devices: frozenset[str] = frozenset()
        # When a query last showed life (started, made a batch, found nothing to read): what the
        # watchdog reads. The app's start counts as a sign until a query has given one.
        self._started = time.time()
        self._signs: dict[str, float] = {}

    def _sign(self, query_id: Any) -> None:
        with self._lock:
            self._signs[str(query_id)] = time.time()

    def last_sign(self) -> float:
        """When the least recently alive query last showed life; the app's start before any."""
        with self._lock:
            return min(self._signs.values()) if self._signs else self._started

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        self._sign(event.id)

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        try:
            progress = QueryProgress.of(event.progress)
        except Exception as exc:  # the metrics must never be why a batch fails
            LOG.warning("metrics: progress not read: %s", exc)
            return
        with self._lock:
            self._queries[progress.query] = progress
        self._sign(event.progress.id)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        self._sign(event.id)

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass

    def add(self, name: str, count: float) -> None:
        assert APP_SERIES[name][0] == "counter", name
        with self._lock:
            self._values[name] += count

    def standing_by(self) -> None:
        """A standby driver's sign of life, for the watchdog: its election turned just now."""
        with self._lock:
            self._started = time.time()

    def set(self, name: str, value: float) -> None:
        assert APP_SERIES[name][0] == "gauge", name
        with self._lock:
            self._values[name] = value

    def keyring(self, sha1: str, revoked: list[str]) -> None:
        """The keyring the running query checks records against: its file's SHA-1, and the
        devices it holds revoked."""
        with self._lock:
            self._keyring = (sha1, list(revoked))

    def export_latest(self, stats: list[str], devices: list[str]) -> None:
        """Export `stats` of each series' newest closed window as gauges, for `devices` (all when
        empty). Off until called: at 10,000 devices x 3 metrics, each stat is 30,000 series."""
        unknown = set(stats) - set(LATEST_STATS)
        if unknown:
            raise ValueError(f"no such statistic of a window: {', '.join(sorted(unknown))}")
        with self._lock:
            self._latest_stats, self._latest_devices = tuple(stats), frozenset(devices)

    def latest_windows(self, closed: list[dict[str, Any]]) -> None:
        """A committed batch's closed windows: each exported series keeps its newest."""
        if not self._latest_stats:
            return
        with self._lock:
            for window in closed:
                if self._latest_devices and window["device"] not in self._latest_devices:
                    continue
                series = (window["device"], window["sensor"], window["metric"])
                held = self._latest.get(series)
                if held is None or window["window_start"] > held["window_start"]:
                    self._latest[series] = window

    def devices(self, presence: Iterable[tuple[str, float, bool]], batch_started: float) -> None:
        """Devices' presence after a batch that started at `batch_started` (those it changed: each
        partition's task tells its own), and whether the app holds each silent: what a Prometheus
        alert on a quiet device reads. A device seen in this batch is exported as seen now, when
        the batch has done with its readings: the state's processing time is the batch's start,
        and two slow batches in a row would make a healthy fleet look quiet for their sum."""
        now = time.time()
        with self._lock:
            for device, seen, silent in presence:
                held = self._devices.get(str(device))
                at = now if seen >= batch_started else held[0] if held else float(seen)
                self._devices[str(device)] = (at, bool(silent))

    def exposition(self) -> str:
        with self._lock:
            queries, values = list(self._queries.values()), dict(self._values)
            devices = [(d, at, silent) for d, (at, silent) in sorted(self._devices.items())]
            keyring = self._keyring
            latest, stats = sorted(self._latest.items()), self._latest_stats
        return (
            "".join(self._lines(queries, values))
            + "".join(self._device_lines(devices))
            + "".join(self._keyring_lines(keyring))
            + "".join(self._schema_lines())
            + "".join(self._latest_lines(latest, stats))
        )

    def _latest_lines(
        self, latest: list[tuple[tuple[str, str, str], dict[str, Any]]], stats: tuple[str, ...]
    ) -> Iterator[str]:
        for stat in stats:
            name, read, text = f"pikit_latest_{stat}", LATEST_STATS[stat][0], LATEST_STATS[stat][1]
            yield f"# HELP {name} {text} of the newest closed window of the device's sensor metric\n"
            yield f"# TYPE {name} gauge\n"
            for (device, sensor, metric), window in latest:
                labels = f'app="{self.app}",device="{device}",sensor="{sensor}",metric="{metric}"'
                yield f"{name}{{{labels}}} {read(window)}\n"

    def _schema_lines(self) -> Iterator[str]:
        # What an agent roll-out checks before any device changes (roles/edge_agent/tasks/contract_gate.yml).
        name = "pikit_app_reading_schema"
        yield f"# HELP {name} 1 for each version of the reading contract the app's code reads\n"
        yield f"# TYPE {name} gauge\n"
        yield from (f'{name}{{app="{self.app}",schema="{v}"}} 1\n' for v in SCHEMAS_READ)

    def _keyring_lines(self, keyring: tuple[str, list[str]] | None) -> Iterator[str]:
        if keyring is None:
            return
        app = f'app="{self.app}"'
        sha1, revoked = keyring
        info, shut_out = "pikit_app_keyring_info", "pikit_app_revoked_devices"
        yield f"# HELP {info} the keyring the app's query checks records against (its file's SHA-1)\n"
        yield f'# TYPE {info} gauge\n{info}{{{app},sha1="{sha1}"}} 1\n'
        yield f"# HELP {shut_out} devices whose records the app refuses from their fence on\n"
        yield f"# TYPE {shut_out} gauge\n{shut_out}{{{app}}} {len(revoked)}\n"

    def _device_lines(self, devices: list[tuple[str, float, bool]]) -> Iterator[str]:
        if not devices:
            return
        app = f'app="{self.app}"'
        seen, silent = "pikit_device_last_reading_timestamp_seconds", "pikit_device_silent"
        yield f"# HELP {seen} when the app last finished a batch holding a reading of the device\n"
        yield f"# TYPE {seen} gauge\n"
        yield from (f'{seen}{{{app},device="{d}"}} {at}\n' for d, at, _ in devices)
        yield f"# HELP {silent} 1 while the app holds the device silent (--silent-after-seconds)\n"
        yield f"# TYPE {silent} gauge\n"
        yield from (f'{silent}{{{app},device="{d}"}} {int(quiet)}\n' for d, _, quiet in devices)

    def _lines(self, queries: list[QueryProgress], values: dict[str, float]) -> Iterator[str]:
        app = f'app="{self.app}"'
        for name, (kind, text) in APP_SERIES.items():
            metric = f"pikit_app_{name}" + ("_total" if kind == "counter" else "")
            yield f"# HELP {metric} {text}\n# TYPE {metric} {kind}\n{metric}{{{app}}} {values[name]}\n"
        per_query: dict[str, tuple[str, Callable[[QueryProgress], float]]] = {
            "batch_id": ("the last micro-batch", lambda q: q.batch_id),
            "input_rows": ("records the last micro-batch read", lambda q: q.input_rows),
            "input_rows_per_second": ("records arriving per second", lambda q: q.input_rows_per_second),
            "processed_rows_per_second": (
                "records processed per second",
                lambda q: q.processed_rows_per_second,
            ),
            "batch_duration_seconds": ("how long the last micro-batch took", lambda q: q.batch_seconds),
            "last_progress_timestamp_seconds": ("when the last micro-batch started", lambda q: q.at),
            "last_batch_end_timestamp_seconds": ("when the last micro-batch ended", lambda q: q.ended),
        }
        for name, (text, read) in per_query.items():
            yield f"# HELP pikit_query_{name} {text}\n# TYPE pikit_query_{name} gauge\n"
            for q in queries:
                yield f'pikit_query_{name}{{{app},query="{q.query}"}} {read(q)}\n'
        yield "# HELP pikit_query_records_behind records between the last batch and the topic's end\n"
        yield "# TYPE pikit_query_records_behind gauge\n"
        for q in queries:
            for topic, count in sorted(q.records_behind.items()):
                yield f'pikit_query_records_behind{{{app},query="{q.query}",topic="{topic}"}} {count}\n'

    def serve(self, listen: str) -> ThreadingHTTPServer:
        """Serve /metrics on `host:port` from a daemon thread."""
        host, port = listen.rsplit(":", 1)
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = metrics.exposition().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer((host, int(port)), Handler)
        threading.Thread(target=server.serve_forever, name="pikit-metrics", daemon=True).start()
        LOG.info("metrics at http://%s/metrics", listen)
        return server
