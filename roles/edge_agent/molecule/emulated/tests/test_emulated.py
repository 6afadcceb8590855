"""The agent and the base roles on emulated Pi architectures (molecule verify).

emu-arm64 and emu-armhf run their own architecture's Debian under qemu-user; the broker and
emu-amd64 are native. What is checked: each device runs its architecture, the base roles applied what a
container has, and every reading reaches Kafka over mTLS with no gap, also across an agent
restart while the broker is away (the spool is on disk, and read back after the restart).
"""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from pikit_contract.readings import decode_batch
from pikit_testkit.polling import wait_for

from pikit.topic import read_to_end

BROKER_NAME, _, BROKER_IP = os.environ.get("EDGE_TEST_BROKER", "=").partition("=")
PKI = Path(os.environ.get("PIKIT_STATE_DIR", "/nonexistent")) / "pki"
if not BROKER_IP:
    pytest.fail("no lab to verify: EDGE_TEST_BROKER is unset (run through molecule)", pytrace=False)
MACHINES = {"emu-amd64": "x86_64", "emu-arm64": "aarch64", "emu-armhf": "armv7l"}


def podman_exec(node: str, *argv: str) -> str:
    return subprocess.run(["podman", "exec", node, *argv], capture_output=True, text=True, check=True).stdout


# Through podman, not testinfra's SSH: testinfra reads the lab's key path unrendered, and the
# broker's SSH master connection has expired by the time the emulated devices' idempotence ends.
def test_each_device_runs_its_own_architecture() -> None:
    assert podman_exec(BROKER_NAME, "uname", "-m").strip() == "x86_64", "the broker is native"
    seen = {}
    for device, machine in MACHINES.items():
        probe = "import platform, lz4, zstandard; print(platform.machine())"
        # the compression extras came from Debian's packages
        agent = podman_exec(device, "/opt/edge-agent/current/venv/bin/python", "-c", probe).strip()
        seen[device] = (podman_exec(device, "uname", "-m").strip(), agent)
        assert seen[device] == (machine, machine), device
        assert podman_exec(device, "systemctl", "is-active", "edge-agent").strip() == "active", device
    print(f"\nemulated: machine and the agent's platform per device {seen}")


def test_the_base_roles_applied_what_a_container_has() -> None:
    for node in [BROKER_NAME, *MACHINES]:
        journald = podman_exec(node, "cat", "/etc/systemd/journald.conf.d/90-pikit.conf")
        assert "SystemMaxUse=" in journald, node
        assert "maxauthtries 3" in podman_exec(node, "sshd", "-T"), node
        # qemu-user cannot load nftables rules (inventory/lab/group_vars/emulated.yml turns the firewall off)
        firewall = subprocess.run(
            ["podman", "exec", node, "nft", "list", "table", "inet", "pikit"],
            capture_output=True,
            check=False,
        )
        assert (firewall.returncode == 0) is (node in (BROKER_NAME, "emu-amd64")), node


def sequences() -> dict[str, list[int]]:
    records = read_to_end(
        "sensor-readings",
        bootstrap_servers=[f"{BROKER_IP}:9092"],
        security_protocol="SSL",
        ssl_cafile=str(PKI / "ca.crt"),
        ssl_certfile=str(PKI / "clients/admin.pem"),
    )
    seqs: dict[str, list[int]] = defaultdict(list)
    for record in records:
        for reading in decode_batch(record.value):
            seqs[reading.device].append(reading.seq)
    return seqs


def spool_depth(device: str) -> float:
    fetch = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9108/metrics').read().decode())"
    out = podman_exec(device, "python3", "-c", fetch)
    return float(
        next(line.split()[1] for line in out.splitlines() if line.startswith("edge_agent_spool_depth "))
    )


def wait(what: str, check: Any, timeout: float) -> None:
    """An agent that is restarting does not answer on its metrics port yet: "not yet", not a failure."""
    wait_for(what, check, timeout, every=3.0, tolerate=(subprocess.CalledProcessError, StopIteration))


def test_readings_spooled_while_the_broker_is_away_survive_an_agent_restart() -> None:
    devices = sorted(MACHINES)
    podman_exec(BROKER_NAME, "systemctl", "stop", "kafka")
    try:
        wait("readings piling up in both spools", lambda: all(spool_depth(d) >= 10 for d in devices), 120)
        before = {d: spool_depth(d) for d in devices}
        for device in devices:
            podman_exec(device, "systemctl", "restart", "edge-agent")
        # The restarted agent reads its spool back from disk before it reports a depth.
        wait(
            "the agents back with their spools",
            lambda: all(spool_depth(d) >= before[d] for d in devices),
            180,
        )
        after = {d: spool_depth(d) for d in devices}
    finally:
        podman_exec(BROKER_NAME, "systemctl", "start", "kafka")
    wait("the spools drained", lambda: all(spool_depth(d) < 5 for d in devices), 300)
    seqs = sequences()
    print(
        f"\nemulated agents: readings in Kafka { ({d: len(s) for d, s in seqs.items()}) };"
        f" spooled before the restart {before}, after it {after}"
    )
    assert set(devices) <= set(seqs)
    for device in devices:
        got = seqs[device]
        assert sorted(set(got)) == list(range(max(got) + 1)), f"{device}: gap in sequence numbers"
