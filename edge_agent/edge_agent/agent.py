"""The agent: each sensor sampled on its own thread and interval, each reading spooled, then sent.

A sensor whose read is slow or hangs (a stuck I2C bus, a DHT22 retrying) delays no other
sensor. A read that takes longer than the sensor's `timeout` is a failed read: its values
are not taken, since no one knows when they were measured. While a read is overdue the
sensor shows as stalled (a log line and the `edge_agent_sensor_stalled` gauge).
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from pikit_contract.readings import Reading, spool_body
from pikit_contract.watchdog import Watchdog

from edge_agent import clock
from edge_agent.config import Config
from edge_agent.kafka_link import KafkaLink
from edge_agent.metrics import Metrics, serve
from edge_agent.sender import Sender
from edge_agent.sensors import Sensor, build
from edge_agent.spool import Spool

log = logging.getLogger("edge_agent")
SHUTDOWN_DRAIN_SECONDS = 10.0
CLOCK_CHECK_SECONDS = 5.0
WATCH_SECONDS = 1.0
# The send loop turns at least every ~20 s (max_block_ms 15 s, then the backoff), however long
# the brokers are away; silent past this, it hangs, and systemd's watchdog restarts the agent.
SEND_LOOP_STALL_SECONDS = 120.0


@dataclass
class Scheduled:
    """A sensor, its schedule, and the read it has in progress (monotonic start), if any."""

    sensor: Sensor
    interval: float
    timeout: float
    reading_since: float | None = None
    stalled: bool = False


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
        self.sensors = [
            Scheduled(build(sensor, i), sensor.interval, sensor.timeout)
            for i, sensor in enumerate(config.sensors)
        ]
        self.metrics.sensors_stalled = lambda: {s.sensor.name: int(s.stalled) for s in self.sensors}
        self._taking = threading.Lock()  # sequence numbers and spool order across sensor threads
        self.closed = False

    def sample(self, sensor: Sensor, timeout: float = math.inf) -> None:
        """Read one sensor once and spool what it gives."""
        started = time.monotonic()
        try:
            measurements = sensor.read()
        except Exception as exc:  # a failing sensor is retried at its next interval
            self._failed(sensor, f"{type(exc).__name__}: {exc}")
            return
        took = time.monotonic() - started
        if took > timeout:
            self._failed(sensor, f"read took {took:.1f}s, over its timeout of {timeout:g}s; values not taken")
            return
        with self._taking:
            if self.closed:
                return
            self._take(sensor, measurements)
        self.wakeup.set()

    def _failed(self, sensor: Sensor, why: str) -> None:
        self.metrics.sensor_errors[sensor.name] += 1
        log.warning("sensor %s failed: %s", sensor.name, why)

    def _take(self, sensor: Sensor, measurements: list[tuple[str, float, str]]) -> None:
        now = time.time()
        for metric, value, unit in measurements:
            if not math.isfinite(value):  # not a JSON number: consumers would reject the record
                self.metrics.sensor_errors[sensor.name] += 1
                log.warning("sensor %s gave %s %r; not taken", sensor.name, metric, value)
                continue
            self.metrics.taken += 1
            reading = Reading(self.config.device_id, self.next_seq, sensor.name, metric, value, unit, now)
            try:
                accepted = self.spool.append(reading.seq, spool_body(reading))
            except OSError as exc:  # a failing disk: the spool took its partial write back
                log.error("spool write failed (%s); reading not taken", exc)
                accepted = False
            if not accepted:  # counted by the spool, by reason
                continue
            self.next_seq += 1
            self.metrics.spooled += 1

    def _sample_forever(self, scheduled: Scheduled) -> None:
        due = time.monotonic()
        while not self.stop.is_set():
            scheduled.reading_since = time.monotonic()
            self.sample(scheduled.sensor, scheduled.timeout)
            scheduled.reading_since = None
            if scheduled.stalled:
                scheduled.stalled = False
                log.info("sensor %s answers again", scheduled.sensor.name)
            # Fixed-rate schedule; after a stall, skip the missed slots instead of bursting.
            due = max(due + scheduled.interval, time.monotonic())
            self.stop.wait(due - time.monotonic())

    def watch(self) -> None:
        """Say which sensors have a read overdue: a hung read never returns to say it itself."""
        now = time.monotonic()
        for scheduled in self.sensors:
            since = scheduled.reading_since
            if since is not None and now - since > scheduled.timeout and not scheduled.stalled:
                scheduled.stalled = True
                log.warning(
                    "sensor %s: its read has hung for %.0fs (timeout %gs); the other sensors go on",
                    scheduled.sensor.name,
                    now - since,
                    scheduled.timeout,
                )

    def run(self) -> None:
        server = serve(self.metrics, self.config.metrics_listen) if self.config.metrics_listen else None
        drain_deadline = [float("inf")]
        link = KafkaLink(self.config, backlog=lambda: self.spool.depth)
        sender = Sender(self.spool, self.metrics, self.wakeup, link, self.config.kafka.readings_per_record)
        thread = threading.Thread(target=sender.run, args=(self.stop, drain_deadline), name="sender")
        thread.start()
        watchdog = Watchdog.for_unit(lambda: sender.last_turn, SEND_LOOP_STALL_SECONDS)
        if watchdog:
            watchdog.start()
        log.info(
            "device %s: %d sensors, spool %s holds %d readings, next seq %d",
            self.config.device_id,
            len(self.sensors),
            self.config.spool.directory,
            self.spool.depth,
            self.next_seq,
        )
        self.wait_for_clock()
        # Daemon threads: a read that hangs for good must not hold the agent's shutdown.
        sampling = [
            threading.Thread(
                target=self._sample_forever, args=(s,), name=f"sensor-{s.sensor.name}", daemon=True
            )
            for s in self.sensors
        ]
        for sampler in sampling:
            sampler.start()
        while not self.stop.wait(WATCH_SECONDS):
            self.watch()
        for sampler, scheduled in zip(sampling, self.sensors, strict=True):  # reads in progress finish
            sampler.join(timeout=min(scheduled.timeout, SHUTDOWN_DRAIN_SECONDS))
        log.info(
            "stopping: draining up to %.0fs, %d readings spooled", SHUTDOWN_DRAIN_SECONDS, self.spool.depth
        )
        drain_deadline[0] = time.monotonic() + SHUTDOWN_DRAIN_SECONDS
        self.wakeup.set()
        thread.join()
        if watchdog:
            watchdog.stop()
        with self._taking:  # a hung read that returns now finds the spool closed and takes nothing
            self.spool.close()
            self.closed = True
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
