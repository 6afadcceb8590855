"""The kafka role's upgrade logic: which releases may be upgraded, and what finalizing raises."""

from __future__ import annotations

import pytest
from ansible_collections.pikit.cluster.plugins.modules import kafka_admin

from tests.conftest import load_filter_plugin

upgrade = load_filter_plugin("kafka", "kafka_upgrade")

# `kafka-storage version-mapping --release-version 4.3`, as Kafka 4.3.1 prints it.
MAPPING_4_3 = """metadata.version=30 (4.3)
kraft.version=1
transaction.version=2
group.version=1
eligible.leader.replicas.version=1
share.version=1
streams.version=1
"""


def test_the_installed_release_is_read_off_the_current_link() -> None:
    links = {"a": "/opt/kafka/kafka_2.13-4.2.2", "b": "/opt/kafka/kafka_2.13-4.3.1/", "c": ""}
    assert upgrade.kafka_installed_versions(links) == {"a": "4.2.2", "b": "4.3.1", "c": ""}


def test_one_older_release_everywhere_may_be_upgraded() -> None:
    assert upgrade.kafka_upgrade_refusals({"a": "4.2.2", "b": "4.2.2"}, "4.3.1") == []


def test_an_upgrade_left_half_way_may_be_finished() -> None:
    assert upgrade.kafka_upgrade_refusals({"a": "4.3.1", "b": "4.2.2"}, "4.3.1") == []


def test_mixed_older_releases_are_refused_naming_each_node() -> None:
    (refusal,) = upgrade.kafka_upgrade_refusals({"a": "4.1.2", "b": "4.2.2"}, "4.3.1")
    assert "a runs 4.1.2; b runs 4.2.2" in refusal


def test_a_downgrade_is_refused_naming_the_node_and_its_release() -> None:
    refusals = upgrade.kafka_upgrade_refusals({"a": "4.3.1", "b": "4.2.2"}, "4.2.2")
    assert len(refusals) == 1
    assert refusals[0].startswith("a runs Kafka 4.3.1, newer than kafka_version=4.2.2")
    assert upgrade.kafka_downgrades({"a": "4.3.1", "b": "4.10.0"}, "4.9.9") == [
        "b runs Kafka 4.10.0, newer than kafka_version=4.9.9: a downgrade is refused "
        "(set kafka_version to the release the cluster runs)"
    ]


def test_a_node_without_kafka_is_refused_by_the_upgrade_not_by_the_role() -> None:
    assert upgrade.kafka_downgrades({"a": "", "b": "4.2.2"}, "4.3.1") == []
    (refusal,) = upgrade.kafka_upgrade_refusals({"a": "", "b": "4.2.2"}, "4.3.1")
    assert refusal.startswith("no Kafka installed on a")


def test_a_target_that_is_not_a_release_is_refused() -> None:
    with pytest.raises(ValueError, match=r"4\.3"):
        upgrade.kafka_upgrade_refusals({"a": "4.2.2"}, "4.3")


def test_the_release_line_is_what_version_mapping_takes() -> None:
    assert upgrade.kafka_release_line("4.3.1") == "4.3"


def test_the_mapping_leaves_kraft_version_out_when_asked() -> None:
    levels = upgrade.kafka_version_mapping(MAPPING_4_3, ["kraft.version"])
    assert levels == {
        "metadata.version": 30,
        "transaction.version": 2,
        "group.version": 1,
        "eligible.leader.replicas.version": 1,
        "share.version": 1,
        "streams.version": 1,
    }
    assert upgrade.kafka_version_mapping(MAPPING_4_3)["kraft.version"] == 1


def test_a_mapping_without_metadata_version_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"metadata\.version"):
        upgrade.kafka_version_mapping("usage: kafka-storage ...")


def test_finalize_raises_only_what_is_below_and_never_lowers() -> None:
    finalized = {"metadata.version": 29, "kraft.version": 0, "group.version": 1, "share.version": 2}
    wanted = {"metadata.version": 30, "group.version": 1, "share.version": 1, "streams.version": 1}
    assert kafka_admin.features_to_raise(finalized, wanted) == {"metadata.version": 30, "streams.version": 1}


def test_the_active_controller_is_found_by_its_node_id() -> None:
    hostvars = {"k1": {"kafka_node": {"id": "1"}}, "k2": {"kafka_node": {"id": "2"}}, "b": {}}
    assert upgrade.kafka_host_of_node(2, hostvars, ["k1", "k2", "b"]) == "k2"
    assert upgrade.kafka_host_of_node(-1, hostvars, ["k1", "k2", "b"]) == ""
