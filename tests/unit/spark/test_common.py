"""The apps' shared command line (the trigger option) and their Kafka client settings."""

from __future__ import annotations

from pathlib import Path

from pikit_spark.common import AVAILABLE_NOW, kafka_python_client, streaming_parser, trigger
from pikit_spark.sink import DELIVERY_TIMEOUT_MS, TransactionalSink

REQUIRED = ["--kafka-properties", "/etc/k.properties", "--readings-topic", "r", "--checkpoint-dir", "/c"]


def test_trigger_is_an_interval_by_default() -> None:
    args = streaming_parser("t", "app").parse_args(REQUIRED)
    assert trigger(args) == {"processingTime": "10 seconds"}


def test_available_now_processes_the_backlog_then_stops() -> None:
    args = streaming_parser("t", "app").parse_args([*REQUIRED, "--trigger", AVAILABLE_NOW])
    assert trigger(args) == {"availableNow": True}


def test_the_sink_takes_the_request_bound_of_the_spark_clients(tmp_path: Path) -> None:
    # A frozen broker holds each request this long: the sink's producer must not wait Kafka's 30 s
    # where the source's consumers give up after 10 s.
    properties = tmp_path / "kafka-client.properties"
    properties.write_text(
        "# rendered by roles/spark\nbootstrap.servers=pi-1:9093,pi-2:9093\n"
        "security.protocol=SSL\nssl.truststore.location=/ca.pem\nssl.keystore.location=/me.pem\n"
        "request.timeout.ms=10000\n"
    )
    client = kafka_python_client(str(properties))
    assert client == {
        "bootstrap_servers": ["pi-1:9093", "pi-2:9093"],
        "security_protocol": "SSL",
        "ssl_cafile": "/ca.pem",
        "ssl_certfile": "/me.pem",
        "request_timeout_ms": 10000,
        "reconnect_backoff_max_ms": 1000,
    }
    sink = TransactionalSink(["out"], "app", client)
    assert sink.producer_options()["request_timeout_ms"] == 10000
    assert (
        TransactionalSink(["out"], "app", {"bootstrap_servers": ["b:1"]}).producer_options()[
            "request_timeout_ms"
        ]
        == DELIVERY_TIMEOUT_MS // 2
    ), "half the delivery timeout without the client's own"


def test_the_broker_never_aborts_a_transaction_that_an_attempt_still_waits_on() -> None:
    # Two brokers of three away for 58 s: the sink's flush waited them out, and Kafka's 60 s
    # transaction timeout aborted the transaction under it and fenced the producer.
    sink = TransactionalSink(["out"], "app", {"bootstrap_servers": ["b:1"]})
    assert sink.attempt_bound() == DELIVERY_TIMEOUT_MS / 1000 + 5 + 2 * 30
    assert sink.producer_options()["transaction_timeout_ms"] > sink.attempt_bound() * 1000
    assert sink.producer_options()["transaction_timeout_ms"] <= 900_000, "Kafka's transaction.max.timeout.ms"


def test_a_producer_batch_holds_many_records_and_fits_a_broker_message() -> None:
    # kafka-python's 16 KiB woke its sender thread for nearly every record of a large batch.
    options = TransactionalSink(["out"], "app", {"bootstrap_servers": ["b:1"]}).producer_options()
    assert options["batch_size"] >= 256 * 1024
    # Even a batch of records that do not compress must pass Kafka's default message.max.bytes.
    assert options["batch_size"] < 1_048_588 // 2
