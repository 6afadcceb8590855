"""Every Kafka node serves the role's Prometheus metrics on its cluster address, and they agree with
the cluster: nothing under-replicated or offline, one active controller, one raft leader that every
node names, as many voters as controllers."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest
from pikit_testkit.molecule_lab import scenario_nodes, scenario_pki, wait_healthy

from pikit import role_default
from pikit.prometheus import Sample, scrape, value

NODES = scenario_nodes()
PORT = int(role_default("kafka", "kafka_metrics_port"))

if not NODES:
    pytest.fail("no lab to verify: KAFKA_TEST_NODES is unset (run through molecule)", pytrace=False)


def scrape_all() -> dict[str, list[Sample]]:
    return {name: scrape(f"http://{address}:{PORT}/metrics", timeout=20) for name, address, _ in NODES}


def settled(check: Callable[[dict[str, list[Sample]]], None], timeout: float = 90) -> dict[str, list[Sample]]:
    """Scrape until `check(pages)` holds (a gauge lags the cluster by a metrics refresh); its last
    AssertionError when it never does."""
    deadline = time.monotonic() + timeout
    while True:
        pages = scrape_all()
        try:
            check(pages)
            return pages
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(5)


def _healthy(pages: dict[str, list[Sample]]) -> None:
    controllers = [name for name, _, roles in NODES if "c" in roles]
    brokers = [name for name, _, roles in NODES if "b" in roles]
    for name in brokers:
        assert value(pages[name], "kafka_replica_manager_underreplicatedpartitions") == 0, name
        assert value(pages[name], "kafka_replica_manager_underminisrpartitioncount") == 0, name
        assert value(pages[name], "kafka_broker_state") == 3, f"{name} is not RUNNING"
        assert (value(pages[name], "kafka_replica_manager_partitioncount") or 0) > 0, name
    active = [
        name for name in controllers if value(pages[name], "kafka_controller_activecontrollercount") == 1
    ]
    assert len(active) == 1, f"active controllers: {active}"
    assert value(pages[active[0]], "kafka_controller_offlinepartitionscount") == 0
    assert value(pages[active[0]], "kafka_controller_activebrokercount") == len(brokers)
    leaders = {name: value(pages[name], "kafka_raft_current_leader") for name in pages}
    assert len(set(leaders.values())) == 1, f"nodes disagree on the raft leader: {leaders}"
    in_lead = [name for name in controllers if value(pages[name], "kafka_raft_state", state="leader") == 1]
    assert len(in_lead) == 1, f"raft leaders: {in_lead}"
    assert value(pages[in_lead[0]], "kafka_raft_number_of_voters") == len(controllers)


def test_every_node_reports_a_healthy_cluster_and_one_quorum_leader() -> None:
    wait_healthy(
        [f"{address}:9092" for _, address, roles in NODES if "b" in roles],
        scenario_pki(),
        sum("b" in roles for _, _, roles in NODES),
    )
    pages = settled(_healthy)
    for name, page in pages.items():
        assert (value(page, "jvm_memory_used_bytes", area="heap") or 0) > 0, name
        assert len(page) < 2000, f"{name}: {len(page)} series, a rule matches too much"


def test_the_readings_topic_is_metered_on_its_brokers() -> None:
    pages = scrape_all()
    sizes = [
        s.value
        for name, _, roles in NODES
        if "b" in roles
        for s in pages[name]
        if s.name == "kafka_log_size" and s.labels.get("topic") == "sensor-readings"
    ]
    assert sizes, "no broker reports the readings topic's partitions"


def test_the_endpoint_listens_on_the_cluster_address_only() -> None:
    name = NODES[0][0]
    probe = f"import socket; socket.create_connection(('127.0.0.1', {PORT}), timeout=5)"
    run = subprocess.run(["podman", "exec", name, "python3", "-c", probe], capture_output=True, text=True)
    assert run.returncode != 0 and "ConnectionRefusedError" in run.stderr, run.stderr[-500:]
