"""The kafka role's filter plugins."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.conftest import load_filter_plugin


def load() -> ModuleType:
    return load_filter_plugin("kafka", "kafka_filters")


filters = load()


def test_scram_users_become_add_scram_arguments() -> None:
    # Each of these passwords was formatted into a real cluster by kafka-storage 4.3.
    users = [{"name": "dashboard", "password": "a b]=c[d"}, {"name": "etl", "password": "p" * 32}]
    assert filters.kafka_scram_format_args(users, 8192) == [
        "--add-scram",
        'SCRAM-SHA-512=[name=dashboard,iterations=8192,password="a b]=c[d"]',
        "--add-scram",
        f'SCRAM-SHA-512=[name=etl,iterations=8192,password="{"p" * 32}"]',
    ]


def test_no_users_no_arguments() -> None:
    assert filters.kafka_scram_format_args([], 8192) == []


@pytest.mark.parametrize("password", ['a"b', "a,b"])
def test_a_comma_or_double_quote_is_refused_naming_the_user(password: str) -> None:
    with pytest.raises(ValueError, match="dashboard"):
        filters.kafka_scram_format_args([{"name": "dashboard", "password": password}], 8192)


def test_the_role_exposes_the_filter() -> None:
    assert "kafka_scram_format_args" in filters.FilterModule().filters()


def test_voters_list_each_controller_as_id_at_address_and_port() -> None:
    nodes = [{"id": 1, "address": "10.0.0.1"}, {"id": "2", "address": "pi-2.lan"}]
    assert load().kafka_voters(nodes, "9093") == "1@10.0.0.1:9093,2@pi-2.lan:9093"


def test_restart_order_is_dedicated_controllers_then_combined_nodes_then_brokers() -> None:
    controllers = ["c1", "both-1", "c2", "both-2"]
    brokers = ["b1", "both-2", "both-1", "b2"]
    order = load().kafka_restart_order(controllers, brokers)
    assert order == ["c1", "c2", "both-1", "both-2", "b1", "b2"]


def test_default_acls_give_devices_the_readings_topic_and_spark_the_rest() -> None:
    acls = load().kafka_default_acls(["edge-1", "edge-2"], "spark", "readings", ["aggregates", "late"])
    as_text = {
        (
            a["principal"],
            a["resource_type"],
            a["resource_name"],
            a.get("pattern_type", "literal"),
            *a["operations"],
        )
        for a in acls
    }
    assert as_text == {
        ("User:edge-1", "topic", "readings", "literal", "write", "describe"),
        ("User:edge-2", "topic", "readings", "literal", "write", "describe"),
        ("User:spark", "topic", "readings", "literal", "read", "describe"),
        ("User:spark", "topic", "aggregates", "literal", "write", "describe", "read"),
        ("User:spark", "topic", "late", "literal", "write", "describe", "read"),
        ("User:spark", "group", "spark-kafka-", "prefixed", "read", "describe"),
        ("User:spark", "group", "pikit-spark-", "prefixed", "read", "describe"),
        ("User:spark", "transactional_id", "pikit-spark-", "prefixed", "write", "describe"),
    }
    assert len(acls) == len(as_text)
