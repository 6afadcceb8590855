"""Each name is defined once. Where a program that cannot read the inventory restates one (the
agent's default topic, for an agent configured by hand), it matches the role default that a site
changes; a name no site changes (pikit_contract.names) is the one the Spark apps use and the one
the kafka role grants."""

from __future__ import annotations

from edge_agent.config import KafkaConfig
from pikit_contract.names import SPARK_PREFIX
from pikit_contract.readings import READINGS_TOPIC
from pikit_spark.sink import TransactionalSink
from pikit_testkit.modules import from_file

from pikit import REPO, role_default


def test_the_agents_default_topic_is_the_sites_default_readings_topic() -> None:
    assert role_default("pikit", "pikit_readings_topic") == READINGS_TOPIC
    assert KafkaConfig(bootstrap_servers=["k:9093"]).topic == READINGS_TOPIC


def test_the_spark_apps_sink_uses_the_prefix_the_kafka_role_grants() -> None:
    filters = from_file("kafka_filters", REPO / "roles/kafka/filter_plugins/kafka_filters.py")
    acls = filters.kafka_default_acls([], "spark", READINGS_TOPIC, ["out"])
    granted = {(a["resource_type"], a["resource_name"]) for a in acls if a.get("pattern_type") == "prefixed"}
    assert {("group", SPARK_PREFIX), ("transactional_id", SPARK_PREFIX)} <= granted
    sink = TransactionalSink(["out"], "sensor_aggregates", {"bootstrap_servers": ["k:9093"]})
    assert sink.transactional_id.startswith(SPARK_PREFIX) and sink.group.startswith(SPARK_PREFIX)
