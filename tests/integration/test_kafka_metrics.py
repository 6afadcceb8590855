"""The kafka role's JMX exporter rules on a real broker: the named metrics exist, with values that
match what the test did to the broker."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from pikit_testkit.broker import LocalBroker

from pikit.prometheus import Sample, scrape, value

RECORDS = 500


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Sample]]:
    broker = LocalBroker(Path(tmp_path_factory.mktemp("kafka-metrics")), metrics=True, short_lived=True)
    broker.start()
    try:
        producer = KafkaProducer(bootstrap_servers=broker.address, acks="all")
        for i in range(RECORDS):
            producer.send("metered", key=b"pi-1", value=b"%d" % i)
        producer.flush(timeout=60)
        producer.close()
        yield scrape(broker.metrics_url, timeout=30)
    finally:
        broker.stop()


def test_throughput_and_log_size_count_what_was_produced(metered: list[Sample]) -> None:
    assert value(metered, "kafka_topic_messagesin_total", topic="metered") == RECORDS
    assert value(metered, "kafka_log_logendoffset", topic="metered", partition="0") == RECORDS
    assert (value(metered, "kafka_log_size", topic="metered", partition="0") or 0) > RECORDS
    assert (value(metered, "kafka_broker_bytesin_total") or 0) > RECORDS
    assert value(metered, "kafka_request_total_time_seconds", request="Produce", percentile="99") is not None


def test_times_are_in_seconds_and_no_name_keeps_a_millisecond_unit(metered: list[Sample]) -> None:
    """Kafka reports milliseconds; the rules convert them to Prometheus's base unit (promtool
    check metrics wants seconds, and names without an abbreviated unit)."""
    now = time.time()
    started = value(metered, "kafka_server_start_time_seconds", node_id="1") or 0
    assert now - 600 < started < now + 60
    applied = value(metered, "kafka_broker_metadata_last_applied_record_timestamp_seconds") or 0
    assert now - 600 < applied < now + 60
    assert 0 <= (value(metered, "kafka_broker_metadata_last_applied_record_lag_seconds") or 0) < 60
    produce = value(metered, "kafka_request_total_time_seconds", request="Produce", percentile="99") or 0
    assert 0 <= produce < 10  # seconds: a local produce takes milliseconds
    assert value(metered, "kafka_broker_metadata_apply_errors_total") == 0
    kafka = {s.name for s in metered if s.name.startswith("kafka_")}  # the JVM's summaries have _count
    assert not sorted(name for name in kafka if re.search(r"(^|_)ms(_|$)|_count$", name))


def test_partition_health_reads_healthy(metered: list[Sample]) -> None:
    for name in (
        "kafka_replica_manager_underreplicatedpartitions",
        "kafka_replica_manager_underminisrpartitioncount",
        "kafka_replica_manager_offlinereplicacount",
        "kafka_controller_offlinepartitionscount",
        "kafka_log_manager_offlinelogdirectorycount",
    ):
        assert value(metered, name) == 0, name
    assert value(metered, "kafka_controller_activecontrollercount") == 1
    assert value(metered, "kafka_controller_activebrokercount") == 1
    assert value(metered, "kafka_broker_state") == 3  # RUNNING


def test_the_kraft_quorum_is_visible(metered: list[Sample]) -> None:
    assert value(metered, "kafka_raft_current_leader") == 1  # the node id
    assert value(metered, "kafka_raft_state", state="leader") == 1
    assert value(metered, "kafka_raft_number_of_voters") == 1
    high_watermark = value(metered, "kafka_raft_high_watermark") or 0
    assert high_watermark >= 1
    # The leader appends a no-op every metadata.max.idle.interval.ms (500 ms) and the exporter reads
    # the two gauges one after the other, so the log end may be a record ahead (CI saw 25 against 24).
    log_end = value(metered, "kafka_raft_log_end_offset") or 0
    assert high_watermark <= log_end <= high_watermark + 2
    assert value(metered, "kafka_feature_finalized_level", feature="metadataVersion") is not None


def test_jvm_heap_and_gc_are_exported_and_the_rest_is_left_out(metered: list[Sample]) -> None:
    assert (value(metered, "jvm_memory_used_bytes", area="heap") or 0) > 0
    assert any(s.name == "jvm_gc_collection_seconds_count" for s in metered)
    prefixes = ("kafka_", "jvm_", "process_", "jmx_")
    assert [s.name for s in metered if not s.name.startswith(prefixes)] == []
    assert len(metered) < 1000, f"{len(metered)} series: a rule matches too much"
