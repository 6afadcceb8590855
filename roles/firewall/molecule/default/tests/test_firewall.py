"""The firewall role on the scenario's three nodes: each node tries the others' ports, and a port
is either answered (open, or refused by a closed port the firewall lets through) or dropped
(no answer). The rules themselves are unit-tested in tests/unit/test_firewall_filters.py."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from pikit_testkit.reach import reach_command

KAFKA, SPARK, EDGE = "10.89.87.11", "10.89.87.12", "10.89.87.13"
ADDRESSES = {"fw-kafka": KAFKA, "fw-spark": SPARK, "fw-edge": EDGE}
# A port nothing listens on, which only the Spark peers' any-port rule opens.
RANDOM_PORT = 45123
# (from, to, port): answered or dropped. fw-kafka is a combined Kafka node and a Spark
# worker, fw-spark the Spark master, fw-edge a device.
EXPECTED = {
    ("fw-edge", KAFKA, 9092): "answered",  # devices produce
    ("fw-edge", KAFKA, 9093): "dropped",  # the quorum is for Kafka nodes
    ("fw-edge", KAFKA, 9094): "dropped",  # replication is for brokers
    ("fw-edge", KAFKA, 9100): "dropped",  # metrics are for the monitoring host and admin
    ("fw-edge", SPARK, 7077): "dropped",  # Spark is for Spark nodes
    ("fw-edge", SPARK, RANDOM_PORT): "dropped",
    ("fw-spark", KAFKA, 9092): "answered",  # the apps read and write Kafka
    ("fw-spark", KAFKA, 9093): "dropped",  # even from a Spark peer
    ("fw-spark", KAFKA, 9094): "dropped",
    ("fw-spark", KAFKA, 7078): "answered",  # the master to its worker
    ("fw-spark", KAFKA, RANDOM_PORT): "answered",  # executors' ports
    ("fw-kafka", SPARK, 7077): "answered",
    ("fw-kafka", SPARK, RANDOM_PORT): "answered",
    ("fw-kafka", EDGE, 22): "answered",  # SSH from anywhere by default
    ("fw-kafka", EDGE, 9108): "dropped",  # the device's agent metrics (none here)
}


def _name(host: Any) -> str:
    return str(host.ansible.get_variables()["inventory_hostname"])


def test_each_node_reaches_what_its_role_needs_and_nothing_else(host: Any) -> None:
    source = _name(host)
    seen = {}
    for (origin, address, port), expected in EXPECTED.items():
        if origin != source:
            continue
        out = host.run(reach_command(address, port)).stdout.strip()
        seen[(address, port)] = (out, expected)
    wrong = {k: v for k, v in seen.items() if v[0] != v[1]}
    assert seen, f"{source}: no probe ran"
    assert not wrong, f"{source}: (address, port): (seen, expected) {wrong}"


@pytest.mark.parametrize(
    ("port", "expected"), [(22, True), (9092, True), (9100, True), (9093, False), (9094, False)]
)
def test_the_controller_reaches_ssh_clients_and_metrics_but_not_the_quorum(
    host: Any, port: int, expected: bool
) -> None:
    if _name(host) != "fw-kafka":
        pytest.skip("probed once, against the Kafka node")
    try:
        with socket.create_connection((KAFKA, port), timeout=3):
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
