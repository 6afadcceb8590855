"""The edge_agent role's agent_release_seen module (the roll-out's check in Kafka) on a real broker."""

from __future__ import annotations

import time
import uuid
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from pikit_testkit.modules import from_file

from pikit import REPO

seen = from_file("agent_release_seen", REPO / "roles/edge_agent/library/agent_release_seen.py")


def test_a_release_counts_only_from_its_device_and_after_the_start(broker: str) -> None:
    topic = f"readings-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=[broker])
    before = int(time.time() * 1000) - 60_000
    # An old record of the new release (before the start), another device's, and the canary's old release.
    producer.send(topic, key=b"edge-1", value=b"{}", headers=[("pikit-agent", b"0.2.0")], timestamp_ms=before)
    producer.send(topic, key=b"edge-2", value=b"{}", headers=[("pikit-agent", b"0.2.0")])
    producer.send(topic, key=b"edge-1", value=b"{}", headers=[("pikit-agent", b"0.1.0")])
    producer.flush()
    since = before + 1000

    def look(device: str, release: str, wait: float = 2.0) -> dict[str, Any]:
        consumer = KafkaConsumer(bootstrap_servers=[broker], enable_auto_commit=False)
        try:
            found: dict[str, Any] = seen.find(
                consumer, topic, device, "pikit-agent", release, since, time.monotonic() + wait
            )
            return found
        finally:
            consumer.close()

    assert look("edge-1", "0.2.0")["seen"] is False
    assert look("edge-1", "0.1.0")["seen"] is True
    assert look("edge-2", "0.2.0")["seen"] is True
    producer.send(
        topic, key=b"edge-1", value=b"{}", headers=[("pikit-signer", b"edge-1"), ("pikit-agent", b"0.2.0")]
    )
    producer.flush()
    found = look("edge-1", "0.2.0")
    assert found["seen"] is True and found["record"]["offset"] == 3
    producer.close()
