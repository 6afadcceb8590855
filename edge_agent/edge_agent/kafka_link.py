"""The Kafka side of sending: the producer, one round as records of the contract, its acknowledgements.

Readings go out in batches of `readings_per_record` per Kafka record (the contract's
envelope), keyed by the device id and signed with the device's key (pikit_contract/signing.py),
with acks=all and the idempotent producer. While a
broker is away the producer keeps retrying what is in flight itself: nothing is resent,
so nothing is duplicated. A broker's return is noticed within MAX_BACKOFF_S.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError
from pikit_contract.brokers import Probe, answering, bootstrap_servers
from pikit_contract.readings import RELEASE_HEADER, SPOOL_HEADER, envelopes
from pikit_contract.signing import headers, read_key
from pikit_contract.tls_handshake import bound_tls_handshakes

from edge_agent.config import Config
from edge_agent.release import VERSION
from edge_agent.sender import MAX_BACKOFF_S
from edge_agent.spool import Record

log = logging.getLogger("edge_agent.sender")
BATCH_BYTES = 256 * 1024
# Long enough to ride out any outage: the spool, not this timeout, bounds what waits.
DELIVERY_TIMEOUT_MS = 7 * 24 * 3600 * 1000
# A round not acknowledged this long is sent again by a new producer. The nemesis (issue 31)
# found a producer that, after one broker was killed -9 for 31 s and came back, retried a
# partition on a broker that was no longer its leader for 10 minutes and more, its metadata never
# mended: the agent's loop kept turning, its spool kept growing, and nothing reached Kafka. A new
# producer bootstraps and reads the leaders afresh; what the old one had written is sent twice,
# and the consumers drop the copies by device and seq.
ACK_STUCK_SECONDS = 60.0


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


class KafkaLink:
    """A Sender's link to Kafka (edge_agent/sender.py's Link)."""

    def __init__(
        self,
        config: Config,
        producer_factory: Callable[..., Any] = KafkaProducer,
        backlog: Callable[[], int] | None = None,
        probe: Probe = answering,
    ) -> None:
        self.config = config
        self.backlog = backlog  # the spool's depth, sent along in a header
        self.producer_factory = producer_factory
        self.probe = probe  # which bootstrap servers answer now (pikit_contract/brokers.py)
        # The probe keeps a new producer off a hung broker; this, the connections it opens later
        # (a partition's new leader may be the broker that hangs).
        bound_tls_handshakes()
        self.producer: Any = None
        # Read at start: a missing or broken key file stops the agent before it samples.
        key_file = config.kafka.signing_key_file
        self.signing_key = read_key(key_file) if key_file else None
        # Which release sent a record: a roll-out waits for its canaries' records to carry it.
        self.release = (RELEASE_HEADER, VERSION.encode())

    def submit(self, records: list[Record]) -> list[Any]:
        if self.producer is None:
            options = producer_options(self.config)
            # Not a hung broker: kafka-python would wait on its TLS handshake for as long as it
            # hangs, and only the watchdog would end the wait. None answering is a failed round.
            answered = bootstrap_servers(options, self.probe)
            self.producer = self.producer_factory(**{**options, "bootstrap_servers": answered})
            log.info("connected to %s", ",".join(answered))
        device, topic = self.config.device_id, self.config.kafka.topic
        size = self.config.kafka.readings_per_record
        spooled = [(SPOOL_HEADER, str(self.backlog()).encode())] if self.backlog else []
        futures = []
        for value in envelopes(device, records, size):
            signed = headers(device, self.signing_key, value) if self.signing_key else []
            futures.append(
                self.producer.send(
                    topic, key=device.encode(), value=value, headers=[*signed, self.release, *spooled]
                )
            )
        return futures

    def acknowledged(self, futures: list[Any], give_up: Callable[[], bool]) -> bool:
        stuck_at = time.monotonic() + ACK_STUCK_SECONDS
        for future in futures:
            while not future.is_done:
                if give_up():
                    return False
                if time.monotonic() >= stuck_at:
                    raise KafkaTimeoutError(
                        f"round not acknowledged in {ACK_STUCK_SECONDS:.0f}s: a new producer sends it again"
                    )
                try:
                    future.get(timeout=1.0)
                except KafkaTimeoutError:
                    continue  # still in flight (e.g. broker away): the producer retries it
            future.get(timeout=0)  # raises the broker's error
        return True

    def close(self, timeout: float) -> None:
        if self.producer is not None:
            try:
                self.producer.close(timeout=timeout)
            except Exception as exc:
                log.debug("closing the producer: %s", exc)
            self.producer = None
