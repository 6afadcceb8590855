"""The artifact cache yields a Kafka install tree that runs a real KRaft broker."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer


def test_produce_and_consume_a_record(broker: str) -> None:
    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    metadata = producer.send("smoke", key=b"pi-1", value=b"hello from the cache").get(timeout=60)
    producer.close()
    assert metadata.offset == 0

    consumer = KafkaConsumer(
        "smoke",
        bootstrap_servers=broker,
        auto_offset_reset="earliest",
        consumer_timeout_ms=30000,
        group_id="smoke-test",
    )
    records = [(r.key, r.value) for r in consumer]
    consumer.close()
    assert records[:1] == [(b"pi-1", b"hello from the cache")]
