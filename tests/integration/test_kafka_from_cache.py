"""The artifact cache yields a Kafka install tree that runs a real KRaft broker; the verifiers'
reader of a topic on it."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from pikit_testkit.molecule_lab import consume_all
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


def test_the_molecule_verifiers_read_every_acknowledged_record_in_each_partitions_order(broker: str) -> None:
    """pikit_testkit.molecule_lab.consume_all, which the kafka role's verifiers judge their
    producers by: every record acknowledged before the call, each partition in its order, and an
    empty topic read as empty once its (zero) ends are reached."""
    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([NewTopic("consumed", 3, 1), NewTopic("untouched", 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    sent = [producer.send("consumed", key=b"k%d" % (i % 5), value=b"%d" % i) for i in range(60)]
    assert all(future.get(timeout=60) for future in sent)
    producer.close()
    got = consume_all("consumed", {"bootstrap_servers": broker}, idle_ms=500)
    assert len(got) == len(sent) == 60
    for key in (b"k%d" % k for k in range(5)):
        values = [int(value) for k, value in got if k == key]
        assert values == sorted(values) and len(values) == 12, (key, values)
    assert consume_all("untouched", {"bootstrap_servers": broker}, idle_ms=500) == []
