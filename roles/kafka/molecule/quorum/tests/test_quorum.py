"""Verify a static controller quorum made dynamic (KIP-853), then grown from 3 to 5 voters and back to 3.

Three dedicated controllers and two brokers start with a static quorum (kafka_quorum: static, as
the kit made clusters before). kafka_quorum: dynamic converts it (kraft.version 1, then the nodes
restart one at a time onto controller.quorum.bootstrap.servers). Then, with kafka_quorum left at
its default (auto: the cluster keeps the kind it runs), the two spare nodes (KAFKA_TEST_JOINING) are
put in kafka_controller with an inventory file of the test's own, as a user edits an inventory, and
the playbook takes them in one at a time; then two of the first three are listed in
kafka_controllers_decommissioned and the playbook lets them go. The quorum is sampled every second
throughout: it always has a leader among its voters, and its voters change one at a time. A
producer (acks=all) runs throughout; every acknowledged record must be read back once, in order.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    playbook,
    podman,
    producing,
    recap,
    scenario_nodes,
    scenario_pki,
    wait_healthy,
)

from pikit import REPO

NODES = scenario_nodes()
CONTROLLERS = [name for name, _, roles in NODES if "c" in roles]
BROKERS = [name for name, _, roles in NODES if "b" in roles]
BOOTSTRAP = [f"{address}:9092" for _, address, roles in NODES if "b" in roles]
PKI = scenario_pki()
JOINING = [item.partition("=")[0] for item in os.environ.get("KAFKA_TEST_JOINING", "").split(",") if item]
# Ids follow the inventory's order unless set: the new controllers get ids after the brokers'.
JOINING_IDS = {name: len(NODES) + i for i, name in enumerate(JOINING, start=1)}
BROKER_IDS = {name: len(CONTROLLERS) + i for i, name in enumerate(BROKERS, start=1)}
LEAVING = CONTROLLERS[:2]
# common, then kafka, as site.yml runs them: a new controller needs the service user first.
KAFKA = REPO / "roles/kafka/molecule/default/converge.yml"
AUTO: dict[str, Any] = {}  # kafka_quorum: auto, the default
TOPIC = "verify-quorum"

if not CONTROLLERS or len(JOINING) != 2:
    pytest.fail(
        "no lab to verify: KAFKA_TEST_NODES or KAFKA_TEST_JOINING unset (run it through molecule)",
        pytrace=False,
    )


def options() -> dict[str, Any]:
    return admin_options(BOOTSTRAP, PKI)


def placement() -> list[tuple[int, int, list[int], list[int]]]:
    """(partition, leader, replicas, ISR) of the scenario's topic, as the brokers report it."""
    admin = KafkaAdminClient(**options())
    try:
        (topic,) = admin.describe_topics([TOPIC])
    finally:
        admin.close()
    return sorted(
        (p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
        for p in topic["partitions"]
    )


def quorum() -> dict[str, Any]:
    admin = KafkaAdminClient(**options())
    try:
        described = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
    finally:
        admin.close()
    return {
        "leader": described["leader_id"],
        "voters": sorted(v["replica_id"] for v in described["current_voters"]),
        "observers": sorted(o["replica_id"] for o in described["observers"]),
    }


@contextmanager
def sampling_the_quorum(samples: list[tuple[float, dict[str, Any] | None]]) -> Iterator[None]:
    """Describe the quorum every second in the background; None where it did not answer."""
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                samples.append((time.monotonic(), quorum()))
            except Exception:  # a broker restarting in the rolling restart: counted, not fatal
                samples.append((time.monotonic(), None))
            stop.wait(1.0)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


@pytest.fixture(scope="module")
def grown_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inventory") / "grown.yml"
    lines = ["all:", "  children:", "    kafka_controller:", "      hosts:"]
    lines += [f"        {name}: {{kafka_node_id: {JOINING_IDS[name]}}}" for name in JOINING]
    lines += ["    kafka_broker:", "      hosts:"]
    lines += [f"        {name}: {{kafka_node_id: {BROKER_IDS[name]}}}" for name in BROKERS]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_static_quorum_is_made_dynamic_under_a_producer() -> None:
    health = wait_healthy(BOOTSTRAP, PKI, len(BROKERS))
    assert health["quorum_voters"] == [1, 2, 3]
    assert finalized_features(BOOTSTRAP, PKI).get("kraft.version", 0) == 0, (
        "the scenario starts with a static quorum"
    )
    assert "controller.quorum.voters=" in podman(
        "exec", CONTROLLERS[0], "cat", "/etc/kafka/server.properties"
    )
    admin = KafkaAdminClient(**options())
    try:
        admin.create_topics([NewTopic(TOPIC, 4, 2)])
    finally:
        admin.close()
    sender = AckedProducer(options())
    with producing(sender, TOPIC):
        began = time.monotonic()
        converted = playbook(KAFKA, {"kafka_quorum": "dynamic"})
        assert converted.returncode == 0, converted.stdout[-6000:]
        took = round(time.monotonic() - began)
    consumed = consume_all(TOPIC, options())
    print(
        f"\nconversion: {took} s; sent {sender.sent}, acknowledged {len(sender.acked)},"
        f" read back {len(consumed)}"
    )
    assert finalized_features(BOOTSTRAP, PKI)["kraft.version"] == 1
    assert wait_healthy(BOOTSTRAP, PKI, len(BROKERS))["quorum_voters"] == [1, 2, 3]
    for name, _, _ in NODES:
        config = podman("exec", name, "cat", "/etc/kafka/server.properties")
        assert (
            "controller.quorum.bootstrap.servers=" in config and "controller.quorum.voters" not in config
        ), name
    assert sender.failed == 0
    assert_every_ack_once_in_order(sender.acked, consumed)


# Each step restarts the running nodes one at a time behind the health gate: minutes on 2 cores.
@pytest.mark.timeout(2400)
def test_controllers_join_and_leave_one_at_a_time_under_a_producer(grown_inventory: Path) -> None:
    sender = AckedProducer(options(), first=1_000_000)  # after the conversion's records, in every key
    samples: list[tuple[float, dict[str, Any] | None]] = []
    timings = {}
    with producing(sender, TOPIC), sampling_the_quorum(samples):
        began = time.monotonic()
        grown = playbook(KAFKA, AUTO, also=grown_inventory)
        assert grown.returncode == 0, grown.stdout[-6000:]
        timings["3 -> 5"] = round(time.monotonic() - began)
        five = quorum()

        began = time.monotonic()
        shrunk = playbook(KAFKA, {"kafka_controllers_decommissioned": LEAVING}, also=grown_inventory)
        assert shrunk.returncode == 0, shrunk.stdout[-6000:]
        timings["5 -> 3"] = round(time.monotonic() - began)
        three = quorum()
    consumed = consume_all(TOPIC, options())
    answered = [q for _, q in samples if q is not None]
    steps = [
        q["voters"] for i, q in enumerate(answered) if i == 0 or q["voters"] != answered[i - 1]["voters"]
    ]
    print(
        f"\nquorum: {timings}; voters went {steps}; {len(samples)} samples, {len(samples) - len(answered)}"
        f" unanswered, leaders seen {sorted({q['leader'] for q in answered})};"
        f" sent {sender.sent - sender.first},"
        f" acknowledged {len(sender.acked)}, failed {sender.failed}, read back {len(consumed)}"
    )
    assert five["voters"] == sorted([1, 2, 3, *JOINING_IDS.values()]), five
    assert three["voters"] == sorted({3, *JOINING_IDS.values()}), three
    assert all(q["leader"] in q["voters"] for q in answered), "a leader among the voters in every sample"
    assert all(
        abs(len(b) - len(a)) == 1 and len(set(a) ^ set(b)) == 1 for a, b in itertools.pairwise(steps)
    ), f"the voters change one at a time: {steps}"
    assert min(len(v) for v in steps) == 3, steps
    silent = [b - a for (a, qa), (b, qb) in itertools.pairwise(samples) if qa is None or qb is None]
    assert sum(silent, 0.0) < 60, (
        f"the quorum answered through it all (unanswered for {sum(silent, 0.0):.0f} s)"
    )
    for name in LEAVING:
        state = podman(
            "exec", name, "sh", "-c", "systemctl is-active kafka; systemctl is-enabled kafka; true"
        )
        assert state.split() == ["inactive", "disabled"], (
            f"{name}'s controller is stopped and disabled: {state}"
        )
    if sender.failed or sender.sent - sender.first != len(sender.acked):
        print(f"partitions of {TOPIC} after the run (sends failed or without an outcome): {placement()}")
    assert sender.failed == 0
    assert len(sender.acked) > 1000
    assert_every_ack_once_in_order(sender.acked, consumed)


def test_a_second_run_changes_nothing(grown_inventory: Path) -> None:
    again = playbook(KAFKA, {"kafka_controllers_decommissioned": LEAVING}, also=grown_inventory)
    assert again.returncode == 0, again.stdout[-5000:]
    assert all(c["changed"] == 0 for c in recap(again).values()), recap(again)


def test_a_dynamic_quorum_is_not_made_static_again(grown_inventory: Path) -> None:
    refused = playbook(KAFKA, {"kafka_quorum": "static"}, also=grown_inventory)
    said = " ".join((refused.stdout + refused.stderr).split())  # the callback wraps long messages
    assert refused.returncode != 0
    assert "a dynamic quorum cannot become static again" in said, said[-3000:]
    assert all(c["changed"] == 0 for c in recap(refused).values()), recap(refused)
