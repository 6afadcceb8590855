"""The artifact cache yields a Kafka install tree that runs a real KRaft broker."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer
from pikit_testkit.polling import wait_for


def test_produce_and_consume_a_record(broker: str) -> None:
    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    metadata = producer.send("smoke", key=b"pi-1", value=b"hello from the cache").get(timeout=60)
    producer.close()
    assert metadata.offset == 0

    consumer = KafkaConsumer(
        "smoke", bootstrap_servers=broker, auto_offset_reset="earliest", group_id="smoke-test"
    )
    records: list[tuple[bytes, bytes]] = []

    def polled() -> list[tuple[bytes, bytes]]:
        # Polled until the record is back (a group join takes seconds), not for a quiet spell after it.
        for batch in consumer.poll(timeout_ms=1000).values():
            records.extend((r.key, r.value) for r in batch)
        return records

    wait_for("the record back from the broker", polled, timeout=60, every=0)
    consumer.close()
    assert records == [(b"pi-1", b"hello from the cache")]
