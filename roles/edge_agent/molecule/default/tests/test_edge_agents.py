"""Verify edge agents converged by the edge_agent role (molecule verify, lab containers).

Per device: the service, its hardening and its key's permissions. Across the lab:
every device's readings reach Kafka over mTLS with no gap in sequence numbers, also
across a broker outage and a renewal of every device's certificate.
"""

from __future__ import annotations

import os
import subprocess
import time
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from edge_agent.contract import decode_batch
from edge_agent.flash import unit
from pikit_testkit.molecule_lab import playbook, podman
from pikit_testkit.polling import wait_for

from pikit import REPO
from pikit.topic import read_to_end

BROKER_NAME, _, BROKER_IP = os.environ.get("EDGE_TEST_BROKER", "=").partition("=")
PKI = Path(os.environ.get("PIKIT_STATE_DIR", "/nonexistent")) / "pki"
if not BROKER_IP:
    pytest.fail("no lab to verify: EDGE_TEST_BROKER is unset (run through molecule)", pytrace=False)


def is_edge(host: Any) -> bool:
    return "edge" in host.ansible.get_variables()["group_names"]


def test_the_agent_runs_hardened(host: Any) -> None:
    if not is_edge(host):
        pytest.skip("not an edge device")
    service = host.service("edge-agent")
    assert service.is_running and service.is_enabled
    show = host.run(
        "systemctl show edge-agent -p User -p ProtectSystem -p NoNewPrivileges -p ReadWritePaths"
    ).stdout
    assert "User=edge-agent" in show
    assert "ProtectSystem=strict" in show
    assert "NoNewPrivileges=yes" in show


def test_the_installed_unit_is_the_one_flash_writes(host: Any) -> None:
    """One unit for both ways onto a device: the role's, and `edge-agent flash`'s."""
    if not is_edge(host):
        pytest.skip("not an edge device")
    config = tomllib.loads(host.file("/etc/edge-agent/config.toml").content_string)
    flashed = unit(config["spool"]["directory"], config["device_id"]).splitlines()[1:]
    installed = host.file("/etc/systemd/system/edge-agent.service").content_string.splitlines()[1:]
    assert installed == flashed


def test_the_private_key_is_the_agents_alone(host: Any) -> None:
    if not is_edge(host):
        pytest.skip("not an edge device")
    for name in ("edge-agent.key", "edge-agent.pem"):
        key = host.file(f"/etc/edge-agent/tls/{name}")
        assert key.user == "edge-agent" and key.mode == 0o600
    assert host.file("/etc/edge-agent/config.toml").mode == 0o640


def test_edge_agent_check_passes_on_the_device(host: Any) -> None:
    if not is_edge(host):
        pytest.skip("not an edge device")
    agent = "/opt/edge-agent/venv/bin/edge-agent"
    check = host.run(f"runuser -u edge-agent -- {agent} check --config /etc/edge-agent/config.toml")
    assert check.rc == 0, check.stderr
    assert "OK" in check.stdout


def sequences() -> dict[str, list[int]]:
    # The agents keep producing: read up to the end as of now, not until the topic goes quiet.
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
    out = subprocess.run(
        [
            "podman",
            "exec",
            device,
            "python3",
            "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9108/metrics').read().decode())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(
        next(line.split()[1] for line in out.splitlines() if line.startswith("edge_agent_spool_depth "))
    )


def test_readings_survive_a_broker_outage_without_gaps() -> None:
    devices = ["edgelab-a", "edgelab-b"]
    subprocess.run(["podman", "exec", BROKER_NAME, "systemctl", "stop", "kafka"], check=True)
    time.sleep(8)
    depths = {d: spool_depth(d) for d in devices}
    subprocess.run(["podman", "exec", BROKER_NAME, "systemctl", "start", "kafka"], check=True)
    deadline = time.monotonic() + 120
    while any(spool_depth(d) > 10 for d in devices):
        assert time.monotonic() < deadline, "spools did not drain after the outage"
        time.sleep(2)
    seqs = sequences()
    print(f"edge agents: readings { ({d: len(s) for d, s in seqs.items()}) }, spooled during outage {depths}")
    assert set(seqs) == set(devices)
    for device, got in seqs.items():
        assert depths[device] >= 10, "readings piled up in the spool while the broker was away"
        assert sorted(set(got)) == list(range(max(got) + 1)), f"{device}: gap in sequence numbers"
        assert len(got) == len(set(got)), f"{device}: duplicates without any agent crash"


def _issued(device: str) -> bytes:
    return (PKI / "issued" / f"{device}-edge-agent.crt").read_bytes()


def test_a_renewed_device_certificate_is_taken_up_without_losing_a_reading() -> None:
    """A renewal window longer than any lifetime makes edge.yml issue every device a new
    certificate while the agents produce; each agent restarts on it and no reading is lost."""
    devices = ["edgelab-a", "edgelab-b"]
    before = {d: _issued(d) for d in devices}
    run = playbook(REPO / "playbooks/edge.yml", {"pki_renew_before_days": 100000})
    assert run.returncode == 0, run.stdout[-4000:]
    renewed_at = {d: max(sequences()[d]) for d in devices}
    for device in devices:
        assert _issued(device) != before[device], f"{device}: certificate not renewed"
        on_device = podman("exec", device, "cat", "/etc/edge-agent/tls/edge-agent.crt").encode()
        assert on_device == _issued(device), f"{device} holds the renewed certificate"
    wait_for(
        "readings sent on the renewed certificates",
        lambda: all(max(s) > renewed_at[d] + 20 for d, s in sequences().items() if d in devices),
        timeout=120,
    )
    seqs = sequences()
    print(f"certificate renewal: readings per device { ({d: len(s) for d, s in seqs.items()}) }")
    for device in devices:
        got = seqs[device]
        assert sorted(set(got)) == list(range(max(got) + 1)), f"{device}: gap in sequence numbers"
