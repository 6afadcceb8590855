"""What the molecule verifiers share: a playbook run on the scenario's inventory as a user would
run it, podman, and (the kafka scenarios) producing through a fault and checking that every
acknowledged record was read back once, in order."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.pikit.cluster.plugins.modules import kafka_admin
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaTimeoutError
from testinfra.utils.ansible_runner import AnsibleRunner

from pikit import REPO

# A verifier's test of a day-2 procedure (a rolling restart, a release rolled out) that takes minutes
# of converges: `make test-ops` sets PIKIT_TEST_OPS=1 for the scenarios that carry one.
ops_only = pytest.mark.skipif(os.environ.get("PIKIT_TEST_OPS") != "1", reason="a make test-ops scenario")


class AckedProducer:
    """Sends key-sequenced records with acks=all and remembers which were acknowledged."""

    def __init__(self, options: dict[str, Any], keys: int = 6, first: int = 0) -> None:
        self.producer = KafkaProducer(**options, acks="all", enable_idempotence=True, linger_ms=5)
        self.keys = keys
        self.first = self.sent = first
        self.acked: list[tuple[bytes, bytes]] = []
        self.failed = 0
        self.lock = threading.Lock()

    def send(self, topic: str) -> None:
        key = f"k{self.sent % self.keys}".encode()
        value = f"{self.sent}".encode()
        self.sent += 1
        future = self.producer.send(topic, key=key, value=value)
        future.add_callback(lambda _md, k=key, v=value: self._ack(k, v))
        future.add_errback(lambda _exc: self._fail())

    def _ack(self, key: bytes, value: bytes) -> None:
        with self.lock:
            self.acked.append((key, value))

    def _fail(self) -> None:
        with self.lock:
            self.failed += 1

    def close(self) -> None:
        """Wait for the outcome of every send; what has none after 2 minutes counts as not
        acknowledged (kafka-python can keep retrying a stale leader after a SIGKILL): the
        property under test is that no *acknowledged* record is lost."""
        try:
            self.producer.flush(timeout=120)
        except KafkaTimeoutError:
            pending = self.sent - self.first - len(self.acked) - self.failed
            print(f"producer: {pending} sends without an outcome after 120s")
        # close() flushes again, and raises on the same stuck batches: they are counted above.
        with contextlib.suppress(KafkaTimeoutError):
            self.producer.close(timeout=5)


@contextlib.contextmanager
def producing(sender: AckedProducer, topic: str) -> Iterator[None]:
    """`sender` sends to `topic` every 10 ms while the block runs, and has every outcome after it."""
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            sender.send(topic)
            time.sleep(0.01)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sender.close()


def assert_every_ack_once_in_order(
    acked: list[tuple[bytes, bytes]], consumed: list[tuple[bytes, bytes]]
) -> None:
    counts: dict[tuple[bytes, bytes], int] = defaultdict(int)
    for record in consumed:
        counts[record] += 1
    lost = [r for r in acked if counts[r] == 0]
    duplicated = [r for r, n in counts.items() if n > 1]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    assert not duplicated, f"{len(duplicated)} records duplicated, e.g. {duplicated[:5]}"
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for key, value in consumed:
        per_key[key].append(int(value))
    for key, sequence in per_key.items():
        assert sequence == sorted(sequence), f"key {key!r} out of order"


def playbook(
    path: Path,
    extra_vars: dict[str, Any],
    also: Path | None = None,
    inventory: Path | None = None,
    state_dir: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a playbook on the molecule scenario's inventory, as a user would; `also` is an inventory
    file read after it (a host added to a group, as a user edits an inventory). A scenario of two
    clusters names each one's own `inventory` and controller `state_dir` (PIKIT_STATE_DIR)."""
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        **({"PIKIT_STATE_DIR": str(state_dir)} if state_dir else {}),
    }
    hosts = (
        str(inventory)
        if inventory
        else (
            os.environ.get("MOLECULE_INVENTORY_FILE")
            or f"{os.environ['MOLECULE_EPHEMERAL_DIRECTORY']}/inventory"
        )
    )
    argv = [
        str(REPO / ".venv/bin/ansible-playbook"),
        "-i",
        hosts,
        *(["-i", str(also)] if also else []),
        str(path),
    ]
    argv += ["-e", json.dumps(extra_vars)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)


def planned_active(run: subprocess.CompletedProcess[str]) -> str:
    """The controller that the run's restart order took as active, as its task's name says
    (roles/kafka/tasks/active_controller.yml)."""
    marker = "Order the restart, the active controller last of its tier: "
    lines = run.stdout.splitlines()
    named = [line.split(marker)[1].split("]")[0].strip() for line in lines if marker in line]
    assert named, "the run ordered no restart"
    return named[-1]


def restarts(run: subprocess.CompletedProcess[str]) -> list[tuple[str, str]]:
    """(host, reasons) of each restart the run made, in its order, from the rolling restart's task names."""
    marker = "TASK [rolling_restart : Restart kafka on "
    steps = [line.split(marker)[1].split("]")[0] for line in run.stdout.splitlines() if marker in line]
    return [(step.split(" for ", 1)[0].strip(), step.split(" for ", 1)[1].strip()) for step in steps]


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], check=True, capture_output=True, text=True).stdout


def journal(node: str, unit: str, since: float) -> str:
    """`unit`'s journal on the lab node `node` since `since` (Unix seconds)."""
    return podman("exec", node, "journalctl", "-u", unit, "--since", f"@{int(since)}", "--no-pager")


def wait_healthy(
    bootstrap: list[str], pki: Path, brokers: int, timeout: int = 240, disk_warn_share: float = 0.85
) -> dict[str, Any]:
    """The kafka role's own health gate, from the controller with the admin certificate: every
    broker in, nothing under-replicated or offline, the quorum caught up. Its report."""
    params = kafka_admin.params_with_defaults(
        action="health",
        bootstrap_servers=bootstrap,
        ssl_cafile=str(pki / "ca.crt"),
        ssl_certfile=str(pki / "clients/admin.pem"),
        expect_brokers=brokers,
        wait_timeout=timeout,
        disk_warn_share=disk_warn_share,
    )
    result = kafka_admin.run(params, check=False)
    assert not result["failed"], f"cluster not healthy: {result['health']}"
    return dict(result["health"])


def finalized_features(bootstrap: list[str], pki: Path) -> dict[str, int]:
    """The cluster's finalized feature levels, as the kafka role's own module reads them."""
    admin = KafkaAdminClient(**admin_options(bootstrap, pki))
    try:
        return dict(kafka_admin.finalized_features(admin))
    finally:
        admin.close()


def admin_options(bootstrap: list[str], pki: Path) -> dict[str, Any]:
    """kafka-python's options for the admin principal over mTLS, with the controller's PKI."""
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(pki / "ca.crt"),
        "ssl_certfile": str(pki / "clients/admin.pem"),
        "ssl_check_hostname": True,
    }


def consume_all(
    topic: str, options: dict[str, Any], idle_ms: int = 8000, timeout: float = 120.0
) -> list[tuple[bytes, bytes]]:
    """Every record of `topic`, in each partition's order: read at least to the end offsets seen
    when called, then until quiet for `idle_ms` (a partition's new leader may expose acknowledged
    records a moment after a failover). Past `timeout`, a TimeoutError. The quiet time counts only
    once the ends are reached: on a loaded machine a consumer's first fetch came more than 8 s
    after its start, and an acknowledged record read as missing (make test-ops at 28ff8ba, kafka/
    default's round trip after its CA rotation)."""
    consumer = KafkaConsumer(**options, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        records: list[tuple[bytes, bytes]] = []
        started = last = time.monotonic()
        deadline = started + timeout
        while True:
            fetched = [r for batch in consumer.poll(timeout_ms=500).values() for r in batch]
            records += [(r.key, r.value) for r in fetched]
            now = time.monotonic()
            last = now if fetched else last
            reached = all(consumer.position(tp) >= ends[tp] for tp in partitions)
            if reached and now - last >= idle_ms / 1000:
                return records
            if now > deadline:
                raise TimeoutError(f"{topic}: not read to its end and quiet within {timeout:.0f}s")
    finally:
        consumer.close()


def recap(run: subprocess.CompletedProcess[str] | str) -> dict[str, dict[str, int]]:
    """A run's PLAY RECAP (from the run, or its output): per host, its counts (ok, changed, ...)."""
    output = run if isinstance(run, str) else run.stdout
    counts = {}
    for host, fields in re.findall(r"^(\S+)\s+: (ok=.*)$", output, re.M):
        counts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
    return counts


def changed(run: subprocess.CompletedProcess[str] | str) -> int:
    """The tasks a run changed, over every host of its PLAY RECAP."""
    return sum(counts.get("changed", 0) for counts in recap(run).values())


def scenario_nodes() -> list[tuple[str, str, str]]:
    """(name, address, roles) of each Kafka node, from the verifier's KAFKA_TEST_NODES
    (molecule.yml): name=address:roles, roles c for a controller and b for a broker."""
    nodes = []
    for item in filter(None, os.environ.get("KAFKA_TEST_NODES", "").split(",")):
        name, address = item.split("=")
        host, roles = address.split(":")
        nodes.append((name, host, roles))
    return nodes


def scenario_pki() -> Path:
    """The scenario's controller-side PKI (PIKIT_STATE_DIR, which molecule.yml sets)."""
    return Path(os.environ.get("PIKIT_STATE_DIR", "/nonexistent")) / "pki"


@dataclass(frozen=True)
class Node:
    """A node of the scenario's inventory, as the verifiers name it: never by the scenario's
    container names, which another scenario (or the end-to-end lab) names otherwise."""

    name: str
    address: str
    groups: frozenset[str]


def inventory_nodes(inventory: str) -> list[Node]:
    """Every node of the inventory molecule hands testinfra (--ansible-inventory)."""
    runner = AnsibleRunner.get_runner(inventory)
    found = []
    for name in runner.get_hosts("all"):
        variables = runner.get_variables(name)
        found.append(Node(name, str(variables["ansible_host"]), frozenset(variables["group_names"])))
    return found
