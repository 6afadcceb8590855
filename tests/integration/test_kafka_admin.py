"""The kafka role's kafka_admin module against a real broker: topics, ACLs, health."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kafka_cluster.admin_module import kafka_admin


def params(broker: str, **overrides: Any) -> dict[str, Any]:
    base = {
        "action": "reconcile",
        "bootstrap_servers": [broker],
        "security_protocol": "PLAINTEXT",
        "ssl_cafile": None,
        "ssl_certfile": None,
        "topics": [],
        "acls": [],
        "remove_extra_acls": False,
        "expect_brokers": 1,
        "max_quorum_lag": 100,
        "wait_timeout": 0,
    }
    return {**base, **overrides}


READINGS = {
    "name": "it-readings",
    "partitions": 2,
    "replication_factor": 1,
    "config": {"retention.ms": 60000},
}
COMPACTED = {
    "name": "it-latest",
    "partitions": 1,
    "replication_factor": 1,
    "config": {"cleanup.policy": "compact"},
}
EDGE_ACL = {
    "principal": "User:edge-9",
    "resource_type": "topic",
    "resource_name": "it-readings",
    "operations": ["write", "describe"],
}
SPARK_GROUP_ACL = {
    "principal": "User:spark",
    "resource_type": "group",
    "resource_name": "spark-kafka-",
    "pattern_type": "prefixed",
    "operations": ["read"],
}


def test_topics_are_created_raised_and_drift_reported(broker: str) -> None:
    first = kafka_admin.run(params(broker, topics=[READINGS, COMPACTED]), check=False)
    assert first["changed"]
    assert "create topic it-readings" in first["changes"]
    assert kafka_admin.run(params(broker, topics=[READINGS, COMPACTED]), check=False)["changed"] is False

    wider = {**READINGS, "partitions": 4, "config": {"retention.ms": 120000}}
    check_only = kafka_admin.run(params(broker, topics=[wider]), check=True)
    assert check_only["changes"] == [
        "raise it-readings partitions 2 -> 4",
        "set it-readings config {'retention.ms': '120000'}",
    ]
    raised = kafka_admin.run(params(broker, topics=[wider]), check=False)
    assert raised["changed"]
    again = kafka_admin.run(params(broker, topics=[wider]), check=False)
    assert again["changed"] is False

    impossible = {**wider, "partitions": 1, "replication_factor": 3}
    drifted = kafka_admin.run(params(broker, topics=[impossible]), check=False)
    assert drifted["changed"] is False
    assert any("cannot shrink" in d for d in drifted["drift"])
    assert any("replication factor 1, inventory asks 3" in d for d in drifted["drift"])


def test_acls_are_added_and_extras_removed_only_on_request(broker: str) -> None:
    added = kafka_admin.run(params(broker, acls=[EDGE_ACL, SPARK_GROUP_ACL]), check=False)
    assert len(added["changes"]) == 3
    assert kafka_admin.run(params(broker, acls=[EDGE_ACL, SPARK_GROUP_ACL]), check=False)["changed"] is False

    kept = kafka_admin.run(params(broker, acls=[EDGE_ACL]), check=False)
    assert kept["changed"] is False
    assert any("spark-kafka-" in d for d in kept["drift"])

    removed = kafka_admin.run(params(broker, acls=[EDGE_ACL], remove_extra_acls=True), check=False)
    assert removed["changes"] == [
        "remove ACL ('User:spark', 'GROUP', 'spark-kafka-', 'PREFIXED', 'READ', 'ALLOW', '*')"
    ]
    final = kafka_admin.run(params(broker, acls=[EDGE_ACL], remove_extra_acls=True), check=False)
    assert final == {"changed": False, "changes": [], "drift": []}


def test_health_reports_a_healthy_single_node(broker: str) -> None:
    result = kafka_admin.run(params(broker, action="health", wait_timeout=30), check=False)
    assert result["health"]["healthy"], result
    assert result["health"]["brokers"] == [1]


def test_health_waits_then_fails_when_brokers_are_missing(broker: str) -> None:
    result = kafka_admin.run(params(broker, action="health", expect_brokers=3, wait_timeout=3), check=False)
    assert result["failed"] is True
    assert result["health"]["healthy"] is False


def test_an_unknown_operation_is_named(broker: str) -> None:
    with pytest.raises(ValueError, match=r"kafka_acls entry for User:edge-9: unknown operations \['FLY'\]"):
        kafka_admin.run(params(broker, acls=[{**EDGE_ACL, "operations": ["fly"]}]), check=False)
