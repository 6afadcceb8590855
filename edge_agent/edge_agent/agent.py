"""The agent's main loop: sample each sensor on its interval, spool every reading, send in the background."""

from __future__ import annotations

import json
import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from edge_agent import clock
from edge_agent.config import Config
from edge_agent.contract import Reading
from edge_agent.metrics import Metrics, serve
from edge_agent.sender import Sender
from edge_agent.sensors import Sensor, build
from edge_agent.spool import Spool

log = logging.getLogger("edge_agent")
SHUTDOWN_DRAIN_SECONDS = 10.0
CLOCK_CHECK_SECONDS = 5.0


class Agent:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.stop = threading.Event()
        self.metrics = Metrics()
        self.wakeup = threading.Event()
        self.spool = Spool(
            Path(config.spool.directory),
            max_bytes=config.spool.max_bytes,
            segment_bytes=min(4 * 1024 * 1024, config.spool.max_bytes // 4),
            fsync=config.spool.fsync,
            fsync_interval=config.spool.fsync_interval,
            full_policy=config.spool.full_policy,
        )
        if self.spool.repaired_bytes:
            log.warning("spool: cut %d bytes of a torn write after a crash", self.spool.repaired_bytes)
        if self.spool.damaged:
            log.error("spool: %d readings lost to damaged frames (disk damage?)", self.spool.damaged)
        self.metrics.spool_state = lambda: (self.spool.depth, self.spool.size_bytes, self.spool.counters())
        self.next_seq = self.spool.high_seq + 1
        self.sensors: list[tuple[Sensor, float]] = [
            (build(sensor, i), sensor.interval) for i, sensor in enumerate(config.sensors)
        ]

    def sample(self, sensor: Sensor) -> None:
        try:
            measurements = sensor.read()
        except Exception as exc:  # a failing sensor is retried at its next interval
            self.metrics.sensor_errors[sensor.name] += 1
            log.warning("sensor %s failed: %s: %s", sensor.name, type(exc).__name__, exc)
            return
        now = time.time()
        for metric, value, unit in measurements:
            if not math.isfinite(value):  # not a JSON number: consumers would reject the record
                self.metrics.sensor_errors[sensor.name] += 1
                log.warning("sensor %s gave %s %r; not taken", sensor.name, metric, value)
                continue
            self.metrics.taken += 1
            reading = Reading(self.config.device_id, self.next_seq, sensor.name, metric, value, unit, now)
            payload = json.dumps(reading.body(), separators=(",", ":")).encode()
            try:
                accepted = self.spool.append(reading.seq, payload)
            except OSError as exc:  # a failing disk: the spool took its partial write back
                log.error("spool write failed (%s); reading not taken", exc)
                accepted = False
            if not accepted:  # counted by the spool, by reason
                continue
            self.next_seq += 1
            self.metrics.spooled += 1
        self.wakeup.set()

    def run(self) -> None:
        server = serve(self.metrics, self.config.metrics_listen) if self.config.metrics_listen else None
        drain_deadline = [float("inf")]
        sender = Sender(self.config, self.spool, self.metrics, self.wakeup)
        thread = threading.Thread(target=sender.run, args=(self.stop, drain_deadline), name="sender")
        thread.start()
        log.info(
            "device %s: %d sensors, spool %s holds %d readings, next seq %d",
            self.config.device_id,
            len(self.sensors),
            self.config.spool.directory,
            self.spool.depth,
            self.next_seq,
        )
        self.wait_for_clock()
        due = [time.monotonic()] * len(self.sensors)
        while not self.stop.is_set():
            now = time.monotonic()
            for i, (sensor, interval) in enumerate(self.sensors):
                if now >= due[i]:
                    self.sample(sensor)
                    # Fixed-rate schedule; after a stall, skip the missed slots instead of bursting.
                    due[i] = max(due[i] + interval, now)
            self.stop.wait(max(0.0, min(due) - time.monotonic()))
        log.info(
            "stopping: draining up to %.0fs, %d readings spooled", SHUTDOWN_DRAIN_SECONDS, self.spool.depth
        )
        drain_deadline[0] = time.monotonic() + SHUTDOWN_DRAIN_SECONDS
        self.wakeup.set()
        thread.join()
        self.spool.close()
        if server:
            server.shutdown()
        log.info("stopped: %d readings left in the spool for the next start", self.spool.depth)

    def wait_for_clock(self, synchronised: Callable[[], bool] = clock.synchronised) -> None:
        """Hold the sensors until the clock is synchronised; the sender drains the spool meanwhile."""
        if not self.config.require_clock_sync:
            return
        waited = 0.0
        while not self.stop.is_set() and not synchronised():
            if waited % 60 == 0:
                log.warning("the clock is not synchronised (NTP): sensors wait (%.0fs so far)", waited)
            self.metrics.clock_unsynchronised = 1
            self.stop.wait(CLOCK_CHECK_SECONDS)
            waited += CLOCK_CHECK_SECONDS
        self.metrics.clock_unsynchronised = 0
        if waited:
            log.info("the clock is synchronised after %.0fs: sampling starts", waited)

    def handle_signals(self) -> None:
        def on_signal(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %d", signum)
            self.stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
