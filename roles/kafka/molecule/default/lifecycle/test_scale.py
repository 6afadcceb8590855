"""Verify broker scale-out and scale-in (playbooks/kafka-rebalance.yml) under a producer (molecule verify).

Three combined nodes run the cluster. The fourth node (KAFKA_TEST_JOINING) is added to
kafka_broker with an inventory file of the test's own, as a user edits an inventory; the converge
makes it join, the rebalance gives it its share of replicas; then, listed in
kafka_brokers_decommissioned, the rebalance moves everything off it, stops and unregisters it.
A producer (acks=all) runs throughout; every acknowledged record must be read back once, in order.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from pikit_testkit.molecule_lab import (
    AckedProducer,
    admin_options,
    assert_every_ack_once_in_order,
    consume_all,
    playbook,
    podman,
    producing,
    recap,
    scenario_nodes,
    scenario_pki,
    wait_healthy,
)

from pikit import REPO

NODES = [name for name, _, _ in scenario_nodes()]
BOOTSTRAP = [f"{address}:9092" for _, address, roles in scenario_nodes() if "b" in roles]
PKI = scenario_pki()
JOINING, _, JOINING_IP = os.environ.get("KAFKA_TEST_JOINING", "").partition("=")
JOINING_ID = len(NODES) + 1  # ids follow inventory order: the combined nodes, then the new broker
CONVERGE = REPO / "roles/kafka/molecule/default/converge.yml"
REBALANCE = REPO / "playbooks/kafka-rebalance.yml"
TOPIC = "verify-scale"

if not NODES or not JOINING_IP:
    pytest.fail(
        "no lab to verify: KAFKA_TEST_NODES or KAFKA_TEST_JOINING unset (run it through molecule)",
        pytrace=False,
    )


def options() -> dict[str, Any]:
    return admin_options(BOOTSTRAP, PKI)


def replicas() -> dict[tuple[str, int], list[int]]:
    admin = KafkaAdminClient(**options())
    try:
        return {
            (t["name"], p["partition_index"]): list(p["replica_nodes"])
            for t in admin.describe_topics()
            for p in t["partitions"]
        }
    finally:
        admin.close()


def throttles() -> dict[str, str]:
    """Any replication throttle left on a broker in service or a topic."""
    admin = KafkaAdminClient(**options())
    try:
        brokers = [ConfigResource(ConfigResourceType.BROKER, str(b)) for b in range(1, len(NODES) + 1)]
        topics = [ConfigResource(ConfigResourceType.TOPIC, t) for t, _ in sorted(set(replicas()))]
        found = {}
        for resource in brokers + topics:
            kind = "broker" if resource.resource_type == ConfigResourceType.BROKER else "topic"
            with_configs = admin.describe_configs([resource])
            for name, entry in next(iter(with_configs.values())).get(resource.name, {}).items():
                if "throttled" in name and entry.get("value") not in (None, "", "9223372036854775807"):
                    found[f"{kind} {resource.name} {name}"] = entry["value"]
        return found
    finally:
        admin.close()


@pytest.fixture(scope="module")
def joining_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inventory") / "joining.yml"
    path.write_text(f"all:\n  children:\n    kafka_broker:\n      hosts:\n        {JOINING}: {{}}\n")
    return path


def test_a_broker_joins_and_leaves_under_a_producer_losing_nothing(joining_inventory: Path) -> None:
    wait_healthy(BOOTSTRAP, PKI, len(NODES))
    admin = KafkaAdminClient(**options())
    try:
        admin.create_topics([NewTopic(TOPIC, 6, 3)])
    finally:
        admin.close()
    sender = AckedProducer(options())
    timings = {}
    with producing(sender, TOPIC):
        began = time.monotonic()
        joined = playbook(CONVERGE, {}, also=joining_inventory)
        assert joined.returncode == 0, joined.stdout[-5000:]
        spread = playbook(REBALANCE, {}, also=joining_inventory)
        assert spread.returncode == 0, spread.stdout[-5000:]
        timings["join and spread"] = time.monotonic() - began
        wait_healthy(BOOTSTRAP, PKI, len(NODES) + 1)
        out = replicas()
        load_out = Counter(b for r in out.values() for b in r)

        began = time.monotonic()
        leaving = {"kafka_brokers_decommissioned": [JOINING]}
        retired = playbook(REBALANCE, leaving, also=joining_inventory)
        assert retired.returncode == 0, retired.stdout[-5000:]
        timings["move off and retire"] = time.monotonic() - began
    consumed = consume_all(TOPIC, options())
    back = replicas()
    load_in = Counter(b for r in back.values() for b in r)
    print(
        f"\nscale: {timings}; replicas per broker with {JOINING}: {dict(sorted(load_out.items()))},"
        f" after it left: {dict(sorted(load_in.items()))}; sent {sender.sent},"
        f" acknowledged {len(sender.acked)}, failed {sender.failed}, read back {len(consumed)}"
    )
    assert load_out[JOINING_ID] > 0, "the new broker got replicas"
    assert max(load_out.values()) - min(load_out.values()) <= 1, load_out
    assert JOINING_ID not in load_in, "every replica moved off the broker taken out"
    assert max(load_in.values()) - min(load_in.values()) <= 1, load_in
    assert all(len(set(r)) == len(r) == len(out[tp]) for tp, r in back.items()), "replication factors kept"
    state = podman("exec", JOINING, "sh", "-c", "systemctl is-active kafka; systemctl is-enabled kafka; true")
    assert state.split() == ["inactive", "disabled"], f"{JOINING}'s broker is stopped and disabled: {state}"
    assert sender.failed == 0
    assert len(sender.acked) > 1000
    assert_every_ack_once_in_order(sender.acked, consumed)
    assert throttles() == {}, "the replication throttle is removed after the moves"
    health = wait_healthy(BOOTSTRAP, PKI, len(NODES))
    assert sorted(health["brokers"]) == list(range(1, len(NODES) + 1))


def test_a_second_run_changes_nothing(joining_inventory: Path) -> None:
    again = playbook(REBALANCE, {"kafka_brokers_decommissioned": [JOINING]}, also=joining_inventory)
    assert again.returncode == 0, again.stdout[-5000:]
    assert "balanced already: nothing moved" in again.stdout
    assert all(c["changed"] == 0 for c in recap(again).values()), recap(again)


def test_a_controller_cannot_be_decommissioned_as_a_broker(joining_inventory: Path) -> None:
    refused = playbook(REBALANCE, {"kafka_brokers_decommissioned": [NODES[0]]}, also=joining_inventory)
    assert refused.returncode != 0
    assert f"kafka_brokers_decommissioned: {NODES[0]} is not a dedicated broker" in refused.stdout
    assert all(c["changed"] == 0 for c in recap(refused).values()), recap(refused)
