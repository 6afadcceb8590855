"""Verify edge agents converged by the edge_agent role (molecule verify, lab containers).

Per device: the service, its hardening and its key's permissions. Across the lab:
every device's readings reach Kafka over mTLS with no gap in sequence numbers, also
across a broker outage, a renewal of every device's certificate, and agent roll-outs
(playbooks/edge-upgrade.yml): a good release canary first, a bad one rolled back.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from edge_agent.flash import layout, unit
from edge_agent.sensors import device_nodes
from pikit_contract.readings import decode_batch
from pikit_testkit.molecule_lab import journal, playbook, podman, recap
from pikit_testkit.polling import wait_for

from pikit import REPO
from pikit.artifacts import Manifest
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
    devices = device_nodes(config.get("sensors", []))
    flashed = unit(config["spool"]["directory"], config["device_id"], devices).splitlines()[1:]
    installed = host.file("/etc/systemd/system/edge-agent.service").content_string.splitlines()[1:]
    assert installed == flashed


def test_the_agent_is_where_flash_puts_it(host: Any) -> None:
    """One layout for both ways onto a device: `edge-agent flash` installs by the role's
    `_edge_agent_layout`, and the role put every file there."""
    if not is_edge(host):
        pytest.skip("not an edge device")
    where = layout()
    tls = f"{where['tls_dir']}/{where['cert_name']}"
    for path in (where["config"], f"{tls}.pem", f"{tls}.crt", f"{where['tls_dir']}/ca.crt", where["bin"]):
        assert host.file(path).exists, path
    assert host.file(where["current"]).is_symlink
    assert host.file(where["current"]).linked_to.startswith(where["releases"] + "/")
    assert host.user(where["user"]).home == where["home"]


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
    agent = "/opt/edge-agent/current/venv/bin/edge-agent"
    check = host.run(f"runuser -u edge-agent -- {agent} check --config /etc/edge-agent/config.toml")
    assert check.rc == 0, check.stderr
    assert "OK" in check.stdout


def readings_records() -> list[Any]:
    # The agents keep producing: read up to the end as of now, not until the topic goes quiet.
    return read_to_end(
        "sensor-readings",
        bootstrap_servers=[f"{BROKER_IP}:9092"],
        security_protocol="SSL",
        ssl_cafile=str(PKI / "ca.crt"),
        ssl_certfile=str(PKI / "clients/admin.pem"),
    )


def sequences() -> dict[str, list[int]]:
    seqs: dict[str, list[int]] = defaultdict(list)
    for record in readings_records():
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


def _resent_since(device: str, since: float) -> bool:
    """Whether the agent gave up on a round since `since` and sent it again (edge_agent/sender.py:
    any failed send, or a round not acknowledged in 60 s). A new producer sends it, so what the
    broker had already written arrives twice, and the consumers drop the copies by seq."""
    return "send failed" in journal(device, "edge-agent", since)


def test_readings_survive_a_broker_outage_without_gaps() -> None:
    devices = ["edgelab-a", "edgelab-b"]
    stopped = time.time() - 1
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
        # On two busy cores the broker may come back after the agent gave up on a round (at
        # 6bc56a8, beside the end-to-end converge, 4 readings twice): a resend it logged, not a crash.
        twice = len(got) - len(set(got))
        assert twice == 0 or _resent_since(device, stopped), (
            f"{device}: {twice} duplicates, no crash, no resend"
        )


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


def _metrics(device: str) -> str:
    return podman(
        "exec",
        device,
        "python3",
        "-c",
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9108/metrics').read().decode())",
    )


def running_release(device: str) -> str:
    match = re.search(r'^edge_agent_build_info\{version="([^"]+)"\} 1', _metrics(device), re.M)
    assert match, f"{device}: no edge_agent_build_info in its metrics"
    return match[1]


def releases_in_kafka() -> dict[str, set[str]]:
    seen: dict[str, set[str]] = defaultdict(set)
    for record in readings_records():
        for name, value in record.headers or ():
            if name == "pikit-agent":
                seen[record.key.decode()].add(value.decode())
    return seen


def add_release(cache: Path, version: str, patch: tuple[str, str, str] | None = None) -> None:
    """Build the agent from this checkout as release `version` (with `patch`: file, old, new) into
    a copy of the artifact cache, recorded in its manifest as `make artifacts` records its own."""
    source = cache.parent / f"src-{version}"
    shutil.copytree(REPO / "edge_agent", source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pyproject = source / "pyproject.toml"
    pyproject.write_text(re.sub(r'(?m)^version = "[^"]+"', f'version = "{version}"', pyproject.read_text()))
    if patch:
        path, old, new = patch
        text = (source / path).read_text()
        assert old in text, f"{path}: {old!r} not found"
        (source / path).write_text(text.replace(old, new))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "--no-deps"]
    subprocess.run([*pip, "-w", str(cache / "agent"), str(source)], check=True, capture_output=True)
    manifest = Manifest.load(cache / "MANIFEST.json")
    manifest.record(f"agent/pikit_edge_agent-{version}-py3-none-any.whl", "built:test")


# Three runs of edge-upgrade.yml and a rollback, about 6 minutes on CI's 2 cores: in make test, its
# molecule lane ends minutes before the end-to-end suite beside it (docs/testing.md).
def test_an_agent_release_rolls_out_canary_first_and_a_bad_one_rolls_back(tmp_path: Path) -> None:
    """edge-upgrade.yml: release 0.9.1 goes to the canary (edgelab-a), then to edgelab-b, each
    counted only once its readings naming 0.9.1 are in Kafka; a second run changes nothing. Release
    0.9.2 sends to a topic the device may not write: the canary falls back to 0.9.1 by itself, the
    roll-out stops, edgelab-b is never touched. Across it all, each agent carries on from the spool
    its predecessor left: no gap in sequence numbers."""
    devices = ["edgelab-a", "edgelab-b"]
    cache = tmp_path / "artifacts"
    cache.mkdir()
    shutil.copytree(REPO / "artifacts/agent", cache / "agent")
    shutil.copy(REPO / "artifacts/MANIFEST.json", cache / "MANIFEST.json")
    add_release(cache, "0.9.1")
    add_release(
        cache,
        "0.9.2",
        ("edge_agent/kafka_link.py", "self.config.kafka.topic\n", 'self.config.kafka.topic + "-v2"\n'),
    )
    before = {d: running_release(d) for d in devices}
    rollout = {
        "pikit_artifact_cache": str(cache),
        "edge_agent_healthy_timeout": 30,
        "edge_upgrade_canaries": 1,
    }

    good = playbook(REPO / "playbooks/edge-upgrade.yml", {**rollout, "edge_agent_version": "0.9.1"})
    assert good.returncode == 0, good.stdout[-4000:]
    batches = good.stdout.split("PLAY [Roll the agent release out, canaries first]")[1:]
    hosts_per_batch = [[d for d in devices if f"[{d}]" in batch] for batch in batches]
    assert hosts_per_batch == [["edgelab-a"], ["edgelab-b"]], (
        f"the canary alone first, then the rest: {hosts_per_batch}"
    )
    assert {d: running_release(d) for d in devices} == dict.fromkeys(devices, "0.9.1")
    assert all("0.9.1" in releases_in_kafka()[d] for d in devices)
    again = playbook(REPO / "playbooks/edge-upgrade.yml", {**rollout, "edge_agent_version": "0.9.1"})
    assert again.returncode == 0, again.stdout[-4000:]
    assert all(counts["changed"] == 0 for counts in recap(again).values()), again.stdout[-3000:]

    bad = playbook(REPO / "playbooks/edge-upgrade.yml", {**rollout, "edge_agent_version": "0.9.2"})
    assert bad.returncode != 0, bad.stdout[-4000:]
    assert "edgelab-a: agent release 0.9.2 was not healthy" in bad.stdout, bad.stdout[-4000:]
    assert "Rolled back to 0.9.1: running, its readings in Kafka again." in bad.stdout, bad.stdout[-4000:]
    assert {d: running_release(d) for d in devices} == dict.fromkeys(devices, "0.9.1")
    assert podman("exec", "edgelab-b", "ls", "/opt/edge-agent/releases").split() == [
        before["edgelab-b"],
        "0.9.1",
    ]
    assert "0.9.2" not in releases_in_kafka()["edgelab-a"], "nothing of the bad release reached the topic"

    resumed = {d: max(sequences()[d]) for d in devices}
    wait_for(
        "readings after the rollback",
        lambda: all(max(s) > resumed[d] + 10 for d, s in sequences().items() if d in devices),
        timeout=120,
    )
    seqs = sequences()
    print(
        f"agent roll-out: readings per device { ({d: len(seqs[d]) for d in devices}) }, "
        f"releases seen in Kafka { {d: sorted(r) for d, r in releases_in_kafka().items()} }"
    )
    for device in devices:
        got = seqs[device]
        assert sorted(set(got)) == list(range(max(got) + 1)), f"{device}: gap in sequence numbers"
