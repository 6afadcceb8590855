import math

import pytest

from pikit.prometheus import parse, value, values

PAGE = """# HELP kafka_log_size Attribute exposed for management
# TYPE kafka_log_size gauge
kafka_log_size{partition="0",topic="sensor-readings"} 1965.0
kafka_log_size{partition="1",topic="sensor-readings"} 2.5E3
kafka_raft_state{state="leader"} 1.0
kafka_raft_election_latency_avg_seconds NaN
jvm_info{runtime="OpenJDK \\"17\\"",vendor="a,b"} 1
edge_agent_spool_bytes 42 1700000000000
"""


def test_samples_with_labels_exponents_and_timestamps() -> None:
    samples = parse(PAGE)
    assert len(samples) == 6
    assert value(samples, "kafka_log_size", partition="1") == 2500.0
    assert values(samples, "kafka_log_size", topic="sensor-readings") == [1965.0, 2500.0]
    assert value(samples, "edge_agent_spool_bytes") == 42.0
    assert math.isnan(value(samples, "kafka_raft_election_latency_avg_seconds") or 0.0)


def test_escaped_quotes_and_commas_inside_label_values() -> None:
    (info,) = [s for s in parse(PAGE) if s.name == "jvm_info"]
    assert info.labels == {"runtime": 'OpenJDK "17"', "vendor": "a,b"}


def test_absent_is_none_not_zero_and_ambiguity_is_an_error() -> None:
    samples = parse(PAGE)
    assert value(samples, "kafka_replica_manager_underreplicatedpartitions") is None
    with pytest.raises(ValueError, match="2 samples of kafka_log_size"):
        value(samples, "kafka_log_size")


def test_a_malformed_line_is_named() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse("ok 1\nnot a sample at all\n")
