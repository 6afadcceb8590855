"""Drains the spool into Kafka; a reading leaves the spool only after the broker acknowledged it.

Readings go out in batches of `readings_per_record` per Kafka record (the contract's
envelope), keyed by the device id, with acks=all and the idempotent producer. Rounds
of RECORDS_PER_ROUND records are pipelined: up to ROUNDS_IN_FLIGHT are sent while the
oldest awaits its acknowledgement, and the spool is committed round by round, in order.
While a broker is away, the producer keeps retrying what is in flight itself (no
resend, so no duplicate); only after an agent crash or a failed producer can the rounds
that were in flight be sent again (at most ROUNDS_IN_FLIGHT x RECORDS_PER_ROUND
records; consumers drop them by device and seq). Connection failures back off
exponentially with jitter, capped at MAX_BACKOFF_S: a broker's return is noticed within
seconds.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError

from edge_agent.config import Config
from edge_agent.contract import SCHEMA_VERSION
from edge_agent.failpoints import BEFORE_SPOOL_COMMIT, crash_if_armed
from edge_agent.metrics import Metrics
from edge_agent.spool import Record, Spool

log = logging.getLogger("edge_agent.sender")
RECORDS_PER_ROUND = 50
ROUNDS_IN_FLIGHT = 4
BATCH_BYTES = 256 * 1024
# Long enough to ride out any outage: the spool, not this timeout, bounds what waits.
DELIVERY_TIMEOUT_MS = 7 * 24 * 3600 * 1000
MAX_BACKOFF_S = 4.0


def pick_compression(choice: str) -> str | None:
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    for codec, module in (("zstd", "zstandard"), ("lz4", "lz4.frame")):
        try:
            __import__(module)
            return codec
        except ImportError:
            continue
    return "gzip"


def producer_options(config: Config) -> dict[str, Any]:
    kafka = config.kafka
    options: dict[str, Any] = {
        "bootstrap_servers": kafka.bootstrap_servers,
        "client_id": f"edge-agent-{config.device_id}",
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": kafka.linger_ms,
        # One request carries many envelopes (kafka-python's 16 KiB default holds one or two).
        "batch_size": BATCH_BYTES,
        "compression_type": pick_compression(kafka.compression),
        "delivery_timeout_ms": DELIVERY_TIMEOUT_MS,
        "request_timeout_ms": 15000,
        "max_block_ms": 15000,
        "bootstrap_timeout_ms": 10000,
        # A broker that comes back is found within seconds; one attempt per few seconds per
        # device does not hammer a dead one.
        "reconnect_backoff_max_ms": int(MAX_BACKOFF_S * 1000),
    }
    if kafka.cert_file:
        options.update(
            security_protocol="SSL",
            ssl_cafile=kafka.ca_file,
            ssl_certfile=kafka.cert_file,
            ssl_check_hostname=True,
        )
    return options


def backoff(failures: int) -> float:
    """Seconds before the next attempt: 0.5, 1, 2, then MAX_BACKOFF_S, each with ±25 % jitter."""
    return float(min(MAX_BACKOFF_S, 0.5 * 2.0 ** min(failures - 1, 8)) * random.uniform(0.75, 1.25))


def envelope(device: str, records: list[Record]) -> bytes:
    """The contract's record value, built from the spooled reading bodies without re-encoding."""
    head = b'{"schema":%d,"device":"%s","readings":[' % (SCHEMA_VERSION, device.encode())
    return head + b",".join(r.payload for r in records) + b"]}"


class Sender:
    def __init__(
        self,
        config: Config,
        spool: Spool,
        metrics: Metrics,
        wakeup: threading.Event,
        producer_factory: Callable[..., Any] = KafkaProducer,
    ) -> None:
        self.config = config
        self.spool = spool
        self.metrics = metrics
        self.wakeup = wakeup
        self.producer_factory = producer_factory
        self.producer: Any = None
        self.failures = 0

    def run(self, stop: threading.Event, drain_deadline: list[float]) -> None:
        """Send until `stop`; then keep draining until `drain_deadline[0]` (monotonic)."""
        # (last spool index, readings, futures) of each round sent and not yet acknowledged
        in_flight: deque[tuple[int, int, list[Any]]] = deque()
        per_round = self.config.kafka.readings_per_record * RECORDS_PER_ROUND
        while True:
            if stop.is_set() and (
                time.monotonic() >= drain_deadline[0] or (self.spool.depth == 0 and not in_flight)
            ):
                break
            try:
                while len(in_flight) < ROUNDS_IN_FLIGHT:
                    records = self.spool.read(per_round, after=in_flight[-1][0] if in_flight else None)
                    if not records:
                        break
                    in_flight.append((records[-1].index, len(records), self._submit(records)))
                if not in_flight:
                    self.wakeup.wait(0.5)
                    self.wakeup.clear()
                    continue
                last, count, futures = in_flight[0]
                if not self._acknowledged(futures, stop, drain_deadline):
                    continue  # stopping: unacknowledged rounds stay in the spool for the next start
                in_flight.popleft()
                crash_if_armed(self.config.spool.directory, BEFORE_SPOOL_COMMIT)
                self.spool.commit(last)
                self.metrics.sent += count
                self.metrics.last_success = time.time()
                self.failures = 0
            except Exception as exc:  # any failure: keep the readings, back off, try again
                in_flight.clear()
                self.metrics.send_errors += 1
                self.failures += 1
                delay = backoff(self.failures)
                log.warning(
                    "send failed (%s: %s); %d readings wait in the spool; retry in %.1fs",
                    type(exc).__name__,
                    exc,
                    self.spool.depth,
                    delay,
                )
                self._close(timeout=0)
                stop.wait(delay)
                if stop.is_set() and time.monotonic() >= drain_deadline[0]:
                    break
        self._close(timeout=5)

    def _submit(self, records: list[Record]) -> list[Any]:
        if self.producer is None:
            self.producer = self.producer_factory(**producer_options(self.config))
            log.info("connected to %s", ",".join(self.config.kafka.bootstrap_servers))
        device = self.config.device_id
        size = self.config.kafka.readings_per_record
        return [
            self.producer.send(
                self.config.kafka.topic, key=device.encode(), value=envelope(device, records[i : i + size])
            )
            for i in range(0, len(records), size)
        ]

    def _acknowledged(self, futures: list[Any], stop: threading.Event, drain_deadline: list[float]) -> bool:
        """Wait for a round's acknowledgements; False when told to stop first. Raises the broker's error."""
        for future in futures:
            while not future.is_done:
                if stop.is_set() and time.monotonic() >= drain_deadline[0]:
                    return False
                try:
                    future.get(timeout=1.0)
                except KafkaTimeoutError:
                    continue  # still in flight (e.g. broker away): keep waiting, never resend
            future.get(timeout=0)
        return True

    def _close(self, timeout: float) -> None:
        if self.producer is not None:
            try:
                self.producer.close(timeout=timeout)
            except Exception as exc:
                log.debug("closing the producer: %s", exc)
            self.producer = None
