"""The agent and the base roles on emulated Pi architectures (molecule verify).

emu-arm64 and emu-armhf run their own architecture's Debian under qemu-user; the broker and
emu-amd64 are native. What is checked: each device runs its architecture, the base roles applied what a
container has, and every reading reaches Kafka over mTLS with no gap, also across an agent
restart while the broker is away (the spool is on disk, and read back after the restart).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from edge_agent.contract import decode_batch

from pikit.topic import read_to_end

BROKER_NAME, _, BROKER_IP = os.environ.get("EDGE_TEST_BROKER", "=").partition("=")
PKI = Path(os.environ.get("PIKIT_STATE_DIR", "/nonexistent")) / "pki"
if not BROKER_IP:
    pytest.fail("no lab to verify: EDGE_TEST_BROKER is unset (run through molecule)", pytrace=False)
MACHINES = {"emu-amd64": "x86_64", "emu-arm64": "aarch64", "emu-armhf": "armv7l"}


def podman_exec(node: str, *argv: str) -> str:
    return subprocess.run(["podman", "exec", node, *argv], capture_output=True, text=True, check=True).stdout


def test_each_device_runs_its_own_architecture(host: Any) -> None:
    name = host.ansible.get_variables()["inventory_hostname"]
    machine = host.run("uname -m").stdout.strip()
    if name not in MACHINES:
        assert machine == "x86_64", "the broker is native"
        pytest.skip("the broker runs no agent")
    assert machine == MACHINES[name]
    agent_python = "/opt/edge-agent/current/venv/bin/python"
    arch = host.run(f"{agent_python} -c 'import platform, lz4, zstandard; print(platform.machine())'")
    assert arch.rc == 0, arch.stderr  # the compression extras came from Debian's packages
    assert arch.stdout.strip() == MACHINES[name]
    assert host.service("edge-agent").is_running


def test_the_base_roles_applied_what_a_container_has(host: Any) -> None:
    assert "SystemMaxUse=" in host.file("/etc/systemd/journald.conf.d/90-pikit.conf").content_string
    assert host.file("/etc/ssh/sshd_config.d/10-pikit.conf").exists
    assert host.run("nft list table inet pikit").rc == 0, "the firewall is on"


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
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(3)


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
