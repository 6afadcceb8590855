"""Verify the connect role (molecule verify): two Kafka Connect workers in one group on the lab, a
real broker, the inventory's file sink. Runs on the controller, the connectors through the role's own
REST client (the pikit.cluster collection's kafka_connectors), the files on the nodes through testinfra."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import testinfra
from ansible_collections.pikit.cluster.plugins.modules import kafka_connectors
from kafka import KafkaProducer
from pikit_testkit.molecule_lab import playbook

from pikit.topic import mtls_client, read_to_end

WORKERS = dict(w.split("=") for w in os.environ.get("CONNECT_TEST_WORKERS", "").split(",") if w)
BROKERS = [b for b in os.environ.get("CONNECT_TEST_BROKERS", "").split(",") if b]
PKI = Path(os.environ.get("PIKIT_STATE_DIR", "/nonexistent")) / "pki"
SINK = "aggregates-file"
OUT = "/srv/pikit/kafka-connect/sensor-aggregates.jsonl"
TOPIC = "sensor-aggregates"

if not WORKERS:
    pytest.fail("no lab to verify: CONNECT_TEST_WORKERS is unset (run through molecule)", pytrace=False)


def urls() -> list[str]:
    return [f"http://{address}:8083" for address in WORKERS.values()]


def host(name: str) -> Any:
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={os.environ['MOLECULE_INVENTORY_FILE']}")


def rest(path: str, url: str | None = None) -> Any:
    return kafka_connectors.Workers([url] if url else urls(), time.monotonic() + 60).call("GET", path)


def sink_host() -> str:
    """The worker that runs the file sink's task (its file is there)."""
    task = rest(f"/connectors/{SINK}/status")["tasks"][0]
    address = task["worker_id"].rsplit(":", 1)[0]
    return next(name for name, ip in WORKERS.items() if ip == address)


def file_lines(timeout: float, count: int) -> list[str]:
    deadline = time.monotonic() + timeout
    found: list[str] = []
    while time.monotonic() < deadline:
        node = host(sink_host())
        found = node.file(OUT).content_string.splitlines() if node.file(OUT).exists else []
        if len(found) >= count:
            break
        time.sleep(1)
    return found


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_each_worker_runs_hardened_as_its_own_user_with_a_key_only_it_reads(name: str) -> None:
    node = host(name)
    service = node.service("kafka-connect")
    assert service.is_running and service.is_enabled
    assert node.check_output("systemctl show -p User --value kafka-connect") == "kafka-connect"
    assert node.check_output("systemctl show -p ProtectSystem --value kafka-connect") == "strict"
    key = node.file("/etc/kafka-connect/tls/kafka-connect.key")
    assert (key.user, key.mode) == ("kafka-connect", 0o600)
    heap = node.check_output("systemctl show -p ExecStart --value kafka-connect")
    assert "-Xmx256m" in heap


def test_the_workers_form_one_group_and_any_of_them_answers_for_it() -> None:
    listed = [sorted(rest("/connectors", url)) for url in urls()]
    assert listed == [[SINK], [SINK]], "each worker lists the group's connectors"
    status = rest(f"/connectors/{SINK}/status")
    assert status["connector"]["state"] == "RUNNING" and [t["state"] for t in status["tasks"]] == ["RUNNING"]


def test_the_file_sink_writes_exactly_what_committed_to_the_aggregates_topic() -> None:
    """Committed records each once, in their partition's order; an aborted transaction's never."""
    options = mtls_client(BROKERS, PKI)
    producer = KafkaProducer(**options, transactional_id="connect-verifier", acks="all")
    producer.init_transactions()
    marker = f"verify-{time.time_ns()}"
    for committed in (True, False, True):
        producer.begin_transaction()
        for i in range(20):
            record = {"marker": marker, "committed": committed, "i": i}
            producer.send(TOPIC, key=f"dev-{i % 3}".encode(), value=json.dumps(record).encode())
        if committed:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()
    in_topic = [r.value.decode() for r in read_to_end(TOPIC, **options)]
    assert sum(marker in v for v in in_topic) == 40, "read_committed sees the two committed transactions"
    written = file_lines(120, len(in_topic))
    assert sorted(written) == sorted(in_topic), "the file holds the topic's committed records, each once"
    assert not [line for line in written if '"committed": false' in line]


def test_a_config_connect_refuses_fails_the_play_with_its_message_and_changes_nothing() -> None:
    before = kafka_connectors.Workers(urls(), time.monotonic() + 60).configs()
    broken = {"name": "no-topics", "config": {"connector.class": "FileStreamSink", "file": "/tmp/x"}}
    run = playbook(
        Path(os.environ["CONNECT_TEST_CONVERGE"]),
        {"connect_connectors": [{"name": n, "config": c} for n, c in before.items()] + [broken]},
    )
    assert run.returncode != 0, run.stdout[-3000:]
    assert "Connect refused these configs; nothing was changed" in run.stdout
    assert "no-topics: topics:" in run.stdout, run.stdout[-3000:]
    assert kafka_connectors.Workers(urls(), time.monotonic() + 60).configs() == before
