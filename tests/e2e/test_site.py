"""End to end: the lab from inventory/lab, provisioned by playbooks/site.yml, the whole pipeline.

The lab's inventory is copied with its own lab name, subnet and host names (containers
are named after hosts), so a user's `make lab` may keep running. The edge agents' seeded
simulated sensors produce; the test adds
what devices get wrong (a record resent after a crash, malformed records and
readings), stops the agents, moves the watermark past the last window, and then
judges the aggregates and dead-letter topics against tests/pipeline_model.py, which
computes them in plain Python from the raw readings topic. A second site.yml run
must report changed=0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edge_agent.contract import Reading, encode_batch
from kafka import KafkaProducer

from pikit import lab
from pikit.topic import mtls_client, read_to_end
from tests.conftest import REPO
from tests.pipeline_model import compare, expected_windows, split_records

LAB = "pikit-e2e"
SUBNET_FROM, SUBNET_TO = "10.89.77.", "10.89.83."
# Two full site.yml runs and a stream: about 8 minutes on a 2-core machine, more under load.
pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]


class Site:
    def __init__(self, root: Path) -> None:
        self.inventory = root / "inventory"
        self.state = root / "state"
        self.logs = root

    def playbook(self, name: str, log: str) -> str:
        env = {
            **os.environ,
            "PATH": f"{REPO / '.venv/bin'}:{os.environ['PATH']}",
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "PIKIT_STATE_DIR": str(self.state),
            "ANSIBLE_NOCOLOR": "1",
        }
        started = time.monotonic()
        proc = subprocess.run(
            ["ansible-playbook", "-i", self.inventory, REPO / "playbooks" / name],
            capture_output=True, text=True, env=env, check=False, cwd=REPO,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
        (self.logs / log).write_text(out)
        print(f"{name} ({log}): exit {proc.returncode} in {time.monotonic() - started:.0f}s")
        assert proc.returncode == 0, f"{name} failed; log tail:\n{out[-4000:]}"
        return out

    def client(self) -> dict[str, Any]:
        return mtls_client([f"{SUBNET_TO}{n}:9092" for n in (11, 12, 13)], self.state / "pki")

    def values(self, topic: str) -> list[bytes]:
        return [r.value for r in read_to_end(topic, **self.client())]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("e2e")
    shutil.copytree(REPO / "inventory/lab", root / "inventory")
    for path in (root / "inventory").rglob("*.yml"):
        text = path.read_text().replace(SUBNET_FROM, SUBNET_TO)
        text = re.sub(r"\b((?:pi|edge)-\d+)\b", r"e2e-\1", text)
        path.write_text(re.sub(r"(?m)^lab_name: .*$", f"lab_name: {LAB}", text))
    site = Site(root)
    lab.down(LAB)
    lab.up(lab.spec_from_inventory(site.inventory))
    try:
        yield site
    finally:
        lab.down(LAB)


def _recap(out: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", out, re.MULTILINE)}


def _agents(action: str) -> None:
    for node in ("e2e-edge-1", "e2e-edge-2"):
        subprocess.run(["podman", "exec", node, "systemctl", action, "edge-agent"], check=True)


def test_pipeline_end_to_end(site: Site) -> None:
    first = _recap(site.playbook("site.yml", "site-1.log"))
    assert set(first) == {f"e2e-{host}" for host in ("pi-1", "pi-2", "pi-3", "pi-4", "edge-1", "edge-2")}

    # What devices get wrong: a record resent after a crash, and malformed input.
    producer = KafkaProducer(**site.client(), acks="all")
    time.sleep(30)
    sent = site.values("sensor-readings")
    assert len(sent) > 10, "the edge agents produced nothing"
    for value in sent[3:6]:
        producer.send("sensor-readings", key=json.loads(value)["device"].encode(), value=value)
    ts = json.loads(sent[-1])["readings"][-1]["ts"]
    bad_reading = {
        "seq": 10**9,
        "sensor": "simulated",
        "metric": "temperature",
        "value": "n/a",
        "unit": "C",
        "ts": ts,
    }
    malformed = [
        b"\x00\x01 binary noise",
        b'{"schema": 1, "device": "e2e-edge-1"}',
        json.dumps({"schema": 1, "device": "e2e-edge-2", "readings": [bad_reading]}).encode(),
    ]
    for value in malformed:
        producer.send("sensor-readings", key=b"e2e-edge-2", value=value)
    producer.flush()

    # The stream ends (SIGTERM: the agents drain their spools); a reading from a test
    # device far enough ahead moves the watermark (2 minutes) past every window.
    _agents("stop")
    readings, dead = split_records(site.values("sensor-readings"))
    last = max(r.ts for r in readings)
    closer = Reading("e2e-closer", 0, "simulated", "temperature", 1.0, "C", last + 240)
    producer.send("sensor-readings", key=b"e2e-closer", value=encode_batch("e2e-closer", [closer]))
    producer.flush()
    producer.close()

    expected = expected_windows(readings)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and compare(expected, site.values("sensor-aggregates")):
        time.sleep(5)
    problems = compare(expected, site.values("sensor-aggregates"))
    assert not problems, "\n".join(problems[:30])
    assert sorted(site.values("sensor-dead-letter")) == sorted(dead)
    assert len(dead) == 3
    devices = {key[0] for key in expected}
    windows = f"{len(expected)} windows of {sorted(devices)}"
    print(f"e2e: {len(readings)} readings, {windows}, {len(dead)} dead letters")

    _agents("start")
    second = _recap(site.playbook("site.yml", "site-2.log"))
    assert second == dict.fromkeys(first, 0), f"second run changed something: {second}"
