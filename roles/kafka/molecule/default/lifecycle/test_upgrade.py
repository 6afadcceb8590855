"""Verify playbooks/kafka-upgrade.yml on a cluster converged at the previous release (molecule verify).

The scenario's three combined nodes run KAFKA_UPGRADE_FROM; the kit's release (the role's
default) is the target. A producer (acks=all) runs through the whole upgrade and the finalize;
every acknowledged record must be read back once, in order.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from pikit_testkit.molecule_lab import (
    AckedProducer,
    admin_options,
    assert_every_ack_once_in_order,
    consume_all,
    finalized_features,
    planned_active,
    playbook,
    podman,
    producing,
    recap,
    restarts,
    scenario_nodes,
    scenario_pki,
    wait_healthy,
)

from pikit import REPO, role_default

NODES = [name for name, _, _ in scenario_nodes()]
BOOTSTRAP = [f"{address}:9092" for _, address, roles in scenario_nodes() if "b" in roles]
PKI = scenario_pki()
FROM = os.environ.get("KAFKA_UPGRADE_FROM", "")
TO = role_default("kafka", "kafka_version")
UPGRADE = REPO / "playbooks/kafka-upgrade.yml"
TOPIC = "verify-upgrade"

if not NODES or not FROM:
    pytest.fail(
        "no lab to verify: KAFKA_TEST_NODES or KAFKA_UPGRADE_FROM unset (run it through molecule)",
        pytrace=False,
    )


def ssl_options() -> dict[str, Any]:
    return admin_options(BOOTSTRAP, PKI)


def health(timeout: int = 240) -> dict[str, Any]:
    return wait_healthy(BOOTSTRAP, PKI, len(NODES), timeout)


def installed(node: str) -> str:
    return podman("exec", node, "readlink", "/opt/kafka/current").strip().rsplit("-", 1)[-1]


def running(node: str) -> str:
    """The release on the running broker's class path (what the JVM loaded, not the link)."""
    command = podman("exec", node, "ps", "-o", "args=", "-C", "java")
    found = re.findall(r"kafka_[0-9.]+-([0-9.]+)/libs", command)
    assert found, f"no Kafka JVM on {node}: {command[:300]}"
    return str(found[0])


def active_controller_other_than(node: str) -> str:
    """Restart the active controller until another one leads, so that "the active controller last"
    differs from inventory order and the test can tell them apart."""
    for _ in range(4):
        leader = NODES[health()["quorum_leader"] - 1]  # combined nodes: ids follow inventory order
        if leader != node:
            return str(leader)
        podman("exec", leader, "systemctl", "restart", "kafka")
    raise AssertionError(f"{node} stayed the active controller through 4 restarts")


@pytest.fixture(scope="module")
def before() -> dict[str, Any]:
    health()
    return {"releases": {n: installed(n) for n in NODES}, "features": finalized_features(BOOTSTRAP, PKI)}


def test_the_cluster_starts_at_the_previous_release(before: dict[str, Any]) -> None:
    assert FROM != TO
    assert before["releases"] == {n: FROM for n in NODES}
    assert {running(n) for n in NODES} == {FROM}
    assert before["features"].get("kraft.version", 0) == 0, "the lab's quorum is static"


def test_unsafe_targets_are_refused_before_any_host_changes(before: dict[str, Any]) -> None:
    older = playbook(UPGRADE, {"kafka_version": "4.0.0"})
    assert older.returncode != 0
    assert f"runs Kafka {FROM}, newer than kafka_version=4.0.0" in older.stdout
    uncached = playbook(UPGRADE, {"kafka_version": "4.3.0"})
    assert uncached.returncode != 0
    assert "is not in the artifact cache" in uncached.stdout
    for run in (older, uncached):
        assert all(c["changed"] == 0 for c in recap(run).values()), recap(run)
    assert {n: installed(n) for n in NODES} == before["releases"]


def test_the_upgrade_and_the_finalize_lose_nothing_under_a_producer(before: dict[str, Any]) -> None:
    admin = KafkaAdminClient(**ssl_options())
    try:
        admin.create_topics([NewTopic(TOPIC, 3, 3)])
    finally:
        admin.close()
    leader = active_controller_other_than(NODES[-1])
    sender = AckedProducer(ssl_options())
    started = time.monotonic()
    with producing(sender, TOPIC):
        upgrade = playbook(UPGRADE, {"kafka_version": TO})
        assert upgrade.returncode == 0, upgrade.stdout[-5000:]
        upgraded = time.monotonic()
        mid = {"releases": {n: installed(n) for n in NODES}, "running": {n: running(n) for n in NODES}}
        kept = {n: releases(n) for n in NODES}
        mid_features = finalized_features(BOOTSTRAP, PKI)
        finalize = playbook(UPGRADE, {"kafka_version": TO, "finalize": True})
        assert finalize.returncode == 0, finalize.stdout[-5000:]
    finished = time.monotonic()
    consumed = consume_all(TOPIC, ssl_options())
    steps = restarts(upgrade)
    print(
        f"\nupgrade {FROM} -> {TO}: {upgraded - started:.0f}s, finalize {finished - upgraded:.0f}s; "
        f"restarts {steps}; features {before['features']} -> {finalized_features(BOOTSTRAP, PKI)}; "
        f"sent {sender.sent}, "
        f"acknowledged {len(sender.acked)}, failed {sender.failed}, read back {len(consumed)}"
    )
    # The leader the run ordered from: a starved quorum may elect another between the test's look
    # and the run's (kafka-1 against kafka-3 in make test-ops' idle lane, 2026-12-06).
    active = planned_active(upgrade)
    print(f"active controller: {leader} when the test looked, {active} when the run ordered the restarts")
    assert [host for host, _ in steps][-1] == active, "the active controller restarts last"
    assert sorted(host for host, _ in steps) == sorted(NODES), "every node restarted once"
    assert all("version" in reasons for _, reasons in steps), steps
    assert mid == {"releases": {n: TO for n in NODES}, "running": {n: TO for n in NODES}}
    assert mid_features == before["features"], "nothing finalized before it was asked for"
    assert kept == dict.fromkeys(NODES, tuple(sorted({FROM, TO}))), (
        "the release to go back to stays until the finalize"
    )
    after = finalized_features(BOOTSTRAP, PKI)
    assert after["metadata.version"] > before["features"]["metadata.version"]
    kraft_before = before["features"].get("kraft.version", 0)
    assert after.get("kraft.version", 0) == kraft_before, "the quorum stays static"
    assert sender.failed == 0
    assert len(sender.acked) > 1000
    assert_every_ack_once_in_order(sender.acked, consumed)
    record = (Path(os.environ["PIKIT_STATE_DIR"]) / f"kafka/upgrade-to-{TO}.json").read_text()
    assert f'"{FROM}"' in record, "the controller keeps what the upgrade started from"
    # The way back is kept until the finalize, and removed by it.
    assert {n: releases(n) for n in NODES} == dict.fromkeys(NODES, (TO,)), "old releases left after finalize"


def releases(node: str) -> tuple[str, ...]:
    """The Kafka releases on the node: unpacked trees and cached tarballs."""
    found = podman("exec", node, "sh", "-c", "ls -d /opt/kafka/kafka_*-* /opt/kafka/dist/kafka_*-*")
    return tuple(sorted({re.sub(r"\.tgz$", "", path).rsplit("-", 1)[-1] for path in found.split()}))


def test_a_second_run_changes_nothing() -> None:
    again = playbook(UPGRADE, {"kafka_version": TO, "finalize": True})
    assert again.returncode == 0, again.stdout[-5000:]
    assert "nothing to raise" in again.stdout
    assert all(c["changed"] == 0 for c in recap(again).values()), recap(again)


def test_the_inventory_release_may_not_roll_the_cluster_back() -> None:
    stale = playbook(REPO / "playbooks/kafka.yml", {"kafka_version": FROM})
    assert stale.returncode != 0
    assert f"runs Kafka {TO}, newer than kafka_version={FROM}: a downgrade is refused" in stale.stdout
    assert {installed(n) for n in NODES} == {TO}
    health()
