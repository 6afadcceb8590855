"""Read a topic up to where it ends now, even while producers keep writing to it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition


def trust_file(pki: Path) -> Path:
    """What a client of the cluster trusts: the trust bundle the pki role assembles (both CAs
    during a rotation), or the CA itself where the bundle is not there yet."""
    bundle = pki / "trust.crt"
    return bundle if bundle.exists() else pki / "ca.crt"


def mtls_client(bootstrap: list[str], pki: Path, principal: str = "admin") -> dict[str, Any]:
    """kafka-python options for a controller-held identity of the cluster's PKI (`<pki>/clients/`)."""
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(trust_file(pki)),
        "ssl_certfile": str(pki / "clients" / f"{principal}.pem"),
    }


def read_to_end(topic: str, timeout: float = 60.0, **client: Any) -> list[Any]:
    """Every record of `topic` up to the end offsets seen at the start of the call."""
    # The Spark apps write in Kafka transactions: aborted records must stay unseen.
    consumer = KafkaConsumer(**client, enable_auto_commit=False, isolation_level="read_committed")
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: not read to its end in {timeout:.0f}s")
            for batch in consumer.poll(timeout_ms=1000).values():
                records.extend(r for r in batch if r.offset < ends[TopicPartition(r.topic, r.partition)])
        return records
    finally:
        consumer.close()
