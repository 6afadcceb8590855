"""Two of the site's names walked from the inventory to where they are used (issue 67's walks):
the readings topic and the brokers' client port. Each, set once in an inventory, reaches the
agent's config on every device and, on every driver, the apps' Kafka client and the aggregating
app's command line. (tests/unit/test_names.py: the programs that restate the default agree.)"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

from pikit_spark.common import read_properties

from tests.conftest import render_fixture

CHILDREN: dict[str, object] = {
    "kafka_controller": {"hosts": {f"pi-{i}": {"ansible_host": f"127.0.0.{10 + i}"} for i in (1, 2, 3)}},
    "kafka_broker": {"hosts": {f"pi-{i}": None for i in (1, 2, 3)}},
    "spark_master": {"hosts": {"pi-4": {"ansible_host": "127.0.0.14"}}},
    "spark_worker": {"hosts": {"pi-2": None, "pi-3": None}},
    "spark_driver": {"hosts": {"pi-3": None, "pi-2": None}},
    "edge": {"hosts": {"edge-1": {"ansible_host": "127.0.0.21"}}},
}


def render(tmp_path: Path, site: dict[str, object]) -> subprocess.CompletedProcess[str]:
    return render_fixture(tmp_path, "render_walk.yml", CHILDREN, ("pikit", "spark", "edge_agent"), site)


def test_the_readings_topic_and_the_client_port_reach_the_agent_and_the_app(tmp_path: Path) -> None:
    proc = render(tmp_path, {"pikit_readings_topic": "site-readings", "pikit_kafka_client_port": 19092})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    brokers = [f"127.0.0.{10 + i}:19092" for i in (1, 2, 3)]

    agent = tomllib.loads((tmp_path / "edge-1.toml").read_text())["kafka"]
    assert agent["topic"] == "site-readings"
    assert agent["bootstrap_servers"] == brokers

    for driver in ("pi-2", "pi-3"):
        # Read as the apps read it.
        client = read_properties(str(tmp_path / f"{driver}.properties"))
        assert client["bootstrap.servers"] == ",".join(brokers)
        argv = json.loads((tmp_path / f"{driver}.argv.json").read_text())
        assert argv[argv.index("--readings-topic") + 1] == "site-readings", argv
