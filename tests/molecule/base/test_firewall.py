"""The firewall on the scenario's nodes, one of each kind at least: a combined Kafka node that is
also a Spark worker, the Spark master, and a device. Each node tries the others' ports, and a port
is either answered (open, or refused by a closed port the firewall lets through) or dropped (no
answer). The rules themselves are unit-tested in tests/unit/test_firewall_filters.py."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from pikit_testkit.molecule_lab import Node
from pikit_testkit.reach import reach_command

# A port nothing listens on, which only the Spark peers' any-port rule opens.
RANDOM_PORT = 45123
# (from, to, port): answered or dropped, by the kind of node (kind_of). The Kafka node is a
# combined Kafka node and a Spark worker.
EXPECTED = {
    ("edge", "kafka", 9092): "answered",  # devices produce
    ("edge", "kafka", 9093): "dropped",  # the quorum is for Kafka nodes
    ("edge", "kafka", 9094): "dropped",  # replication is for brokers
    ("edge", "kafka", 9100): "dropped",  # metrics are for the monitoring host and admin
    ("edge", "spark", 7077): "dropped",  # Spark is for Spark nodes
    ("edge", "spark", RANDOM_PORT): "dropped",
    ("spark", "kafka", 9092): "answered",  # the apps read and write Kafka
    ("spark", "kafka", 9093): "dropped",  # even from a Spark peer
    ("spark", "kafka", 9094): "dropped",
    ("spark", "kafka", 7078): "answered",  # the master to its worker
    ("spark", "kafka", RANDOM_PORT): "answered",  # executors' ports
    ("kafka", "spark", 7077): "answered",
    ("kafka", "spark", RANDOM_PORT): "answered",
    ("kafka", "edge", 22): "answered",  # SSH from anywhere by default
    ("kafka", "edge", 9108): "dropped",  # the agent's metrics, for a monitoring host (none here)
}


def kind_of(node: Node) -> str | None:
    """The node's kind in EXPECTED; None for a node the table says nothing of (a Connect worker,
    whose rules tests/molecule/connect checks)."""
    if "kafka_broker" in node.groups:
        assert "spark_worker" in node.groups, f"{node.name}: the table wants a Kafka node that is a worker"
        return "kafka"
    if "spark_master" in node.groups:
        return "spark"
    return "edge" if "edge" in node.groups else None


def _first_of_each_kind(nodes: list[Node]) -> dict[str, Node]:
    found: dict[str, Node] = {}
    for node in nodes:
        if kind := kind_of(node):
            found.setdefault(kind, node)
    assert set(found) == {"kafka", "spark", "edge"}, f"the scenario lacks a kind of node: {sorted(found)}"
    return found


def test_each_node_reaches_what_its_role_needs_and_nothing_else(
    host: Any, node: Node, nodes: list[Node]
) -> None:
    targets = _first_of_each_kind(nodes)
    kind = kind_of(node)
    if kind is None or node != targets[kind]:
        pytest.skip("probed from one node of each kind")  # a dropped probe waits out its timeout
    seen = {}
    for (origin, to, port), expected in EXPECTED.items():
        if origin != kind:
            continue
        out = host.run(reach_command(targets[to].address, port)).stdout.strip()
        seen[(targets[to].name, port)] = (out, expected)
    wrong = {k: v for k, v in seen.items() if v[0] != v[1]}
    assert seen, f"{node.name}: no probe ran"
    assert not wrong, f"{node.name}: (node, port): (seen, expected) {wrong}"


@pytest.mark.parametrize(
    ("port", "expected"), [(22, True), (9092, True), (9100, True), (9093, False), (9094, False)]
)
def test_the_controller_reaches_ssh_clients_and_metrics_but_not_the_quorum(
    node: Node, nodes: list[Node], port: int, expected: bool
) -> None:
    kafka = _first_of_each_kind(nodes)["kafka"]
    if node != kafka:
        pytest.skip("probed once, against the Kafka node")
    try:
        with socket.create_connection((kafka.address, port), timeout=3):
            answered = True
    except ConnectionRefusedError:
        answered = True
    except OSError:
        answered = False
    assert answered == expected


def test_the_rules_are_the_kits_own_table_loaded_at_boot(host: Any) -> None:
    table = host.run("nft list table inet pikit")
    assert table.rc == 0, table.stderr
    assert "policy drop" in table.stdout and 'log prefix "pikit-fw drop: "' in table.stdout
    assert host.service("nftables").is_enabled
    assert (
        "ExecStartPost=/usr/sbin/nft -f /etc/pikit/firewall.nft"
        in host.file("/etc/systemd/system/nftables.service.d/pikit.conf").content_string
    )
