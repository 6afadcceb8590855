"""The connect role on a real Kafka Connect worker: the worker runs the role's own configuration
(templates/connect-distributed.properties.j2) from the kit's Kafka release, talks mTLS to a real
broker as its own principal under the kafka role's ACLs, and the role's kafka_connectors module
reconciles its connectors through the REST API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.pikit.cluster.plugins.modules import kafka_admin, kafka_connectors
from kafka import KafkaProducer
from pikit_testkit.broker import LocalBroker, free_port
from pikit_testkit.certs import certificate, new_key, pem
from pikit_testkit.connect import GROUP, LocalWorker, OneWorkerSite
from pikit_testkit.modules import from_file

from pikit import REPO, status

AGGREGATES = "sensor-aggregates"
SECRET = "sensor-secret"  # a topic the workers have no ACL for
RECORDS = 40


def admin_client(worker: LocalWorker) -> dict[str, Any]:
    """kafka-python settings for the broker's super user (the fixture's admin.pem)."""
    return {
        "bootstrap_servers": [worker.broker.address],
        "security_protocol": "SSL",
        "ssl_cafile": str(worker.work / "ca.crt"),
        "ssl_certfile": str(worker.work / "admin.pem"),
    }


def output(worker: LocalWorker, name: str) -> Path:
    """A file a file sink of the test writes on the worker's machine."""
    return worker.work / f"out.{name}"


def file_sink(name: str, topic: str, out: Path) -> dict[str, Any]:
    return {
        "name": name,
        "config": {
            "connector.class": "FileStreamSink",
            "topics": topic,
            "file": str(out),
            "tasks.max": 1,
            "consumer.override.isolation.level": "read_committed",
        },
    }


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWorker]:
    work = tmp_path_factory.mktemp("connect")
    ca_key, admin_key, worker_key = new_key(), new_key(), new_key()
    ca = certificate("it CA", ca_key, "it CA", ca_key, ca=True)
    (work / "ca.crt").write_bytes(pem(None, ca))
    (work / "admin.pem").write_bytes(
        pem(admin_key, certificate("bench", admin_key, "it CA", ca_key, ip="127.0.0.1"))
    )
    tls_dir = work / "tls"
    tls_dir.mkdir()
    (tls_dir / "ca.crt").write_bytes(pem(None, ca))
    worker_cert = certificate("connect", worker_key, "it CA", ca_key, ip="127.0.0.1")
    (tls_dir / "kafka-connect.pem").write_bytes(pem(worker_key, worker_cert))
    broker = LocalBroker(
        work / "kafka", tls=(work / "admin.pem", work / "ca.crt"), short_lived=True, cn_principals=True
    )
    broker.start()
    tls = {"ssl_cafile": str(work / "ca.crt"), "ssl_certfile": str(work / "admin.pem")}
    filters = from_file("kafka_filters", REPO / "roles/kafka/filter_plugins/kafka_filters.py")
    connect = {"principal": "connect", "group_id": GROUP}
    acls = filters.kafka_default_acls([], "spark", "sensor-readings", [AGGREGATES], [], connect)
    topics = [{"name": name, "partitions": 2, "replication_factor": 1} for name in (AGGREGATES, SECRET)]
    reconciled = kafka_admin.run(
        kafka_admin.params_with_defaults(bootstrap_servers=[broker.address], topics=topics, acls=acls, **tls),
        False,
    )
    assert reconciled["changed"], reconciled
    producer = KafkaProducer(bootstrap_servers=[broker.address], security_protocol="SSL", **tls)
    for i in range(RECORDS):
        for topic in (AGGREGATES, SECRET):
            producer.send(topic, key=b"edge-%d" % (i % 3), value=b'{"n": %d}' % i)
    producer.flush(timeout=60)
    producer.close()

    local = LocalWorker(work, broker, tls_dir)
    try:
        local.start()
        assert local.configs() == {}
        yield local
    finally:
        local.stop()
        broker.stop()


def lines(path: Path, count: int, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = path.read_text().splitlines() if path.exists() else []
        if len(found) >= count:
            return found
        time.sleep(0.5)
    return path.read_text().splitlines() if path.exists() else []


def test_a_declared_file_sink_is_created_runs_and_writes_every_record_once(worker: LocalWorker) -> None:
    out = output(worker, "aggregates")
    declared = [file_sink("aggregates-file", AGGREGATES, out)]
    assert worker.reconcile(declared, check=True)["created"] == ["aggregates-file"]
    assert worker.configs() == {}, "check mode changes nothing"

    result = worker.reconcile(declared)
    assert (result["created"], result["updated"], result["deleted"]) == (["aggregates-file"], [], [])
    assert result["states"]["aggregates-file"]["tasks"] == ["RUNNING"]
    written = lines(out, RECORDS)
    assert sorted(written) == sorted(f'{{"n": {i}}}' for i in range(RECORDS))

    again = worker.reconcile(declared)
    assert not again["changed"] and (again["created"], again["updated"], again["deleted"]) == ([], [], [])


def test_a_config_connect_refuses_fails_with_its_message_and_changes_nothing(worker: LocalWorker) -> None:
    before = worker.configs()
    broken = {
        "name": "no-topics",
        "config": {"connector.class": "FileStreamSink", "file": str(output(worker, "none"))},
    }
    with pytest.raises(kafka_connectors.ConnectError, match=r"no-topics: topics: .*topics.regex"):
        worker.reconcile([*before_as_declared(before), broken])
    unknown = {"name": "nowhere", "config": {"connector.class": "NoSuchConnector", "topics": AGGREGATES}}
    with pytest.raises(kafka_connectors.ConnectError, match=r"nowhere: .*NoSuchConnector"):
        worker.reconcile([*before_as_declared(before), unknown])
    assert worker.configs() == before


def test_a_changed_config_is_set_and_an_unlisted_connector_removed(worker: LocalWorker) -> None:
    first = file_sink("to-change", AGGREGATES, output(worker, "first"))
    assert worker.reconcile([first], remove_unlisted=False)["created"] == ["to-change"]
    assert len(lines(output(worker, "first"), RECORDS)) == RECORDS
    changed = file_sink("to-change", AGGREGATES, output(worker, "second"))
    result = worker.reconcile([changed], remove_unlisted=False)
    assert result["updated"] == ["to-change"] and result["deleted"] == []
    assert worker.configs()["to-change"]["file"].endswith(".second")
    # The changed sink goes on from its group's offsets: what it exported stays exported.
    producer = KafkaProducer(**admin_client(worker))
    for i in range(5):
        producer.send(AGGREGATES, key=b"edge-9", value=f'{{"after": {i}}}'.encode())
    producer.close(timeout=30)
    assert sorted(lines(output(worker, "second"), 5)) == sorted(f'{{"after": {i}}}' for i in range(5))

    result = worker.reconcile([])
    assert sorted(result["deleted"]) == sorted(["aggregates-file", "to-change"])
    assert worker.configs() == {}


def test_a_restart_asked_for_starts_the_tasks_anew_and_only_then(worker: LocalWorker) -> None:
    """The role asks for the mirror's restart when the worker's certificate for the core was renewed.
    The sink opens its file when its task starts: a file deleted under a running task comes back
    only when the task starts again."""
    out = output(worker, "restarted")
    declared = [file_sink("to-restart", AGGREGATES, out)]
    worker.reconcile(declared, remove_unlisted=False)
    assert lines(out, RECORDS), "the sink wrote the topic"
    out.unlink()
    idle = worker.reconcile(declared, remove_unlisted=False)
    assert not idle["changed"] and idle["restarted"] == [] and not out.exists()
    result = worker.reconcile(declared, remove_unlisted=False, restart=["to-restart", "not-there"])
    assert result["changed"] and result["restarted"] == ["to-restart"], result
    assert result["states"]["to-restart"]["tasks"] == ["RUNNING"]
    assert out.exists(), "the task started anew and opened its file again"
    assert worker.reconcile([])["deleted"] == ["to-restart"]


def test_a_sink_on_a_topic_outside_the_workers_acls_fails_and_the_play_says_why(worker: LocalWorker) -> None:
    # The module's default settle is 30 s; a loaded CI machine delayed a task's first poll past 10.
    result = worker.reconcile([file_sink("secret-file", SECRET, output(worker, "secret"))], settle_seconds=60)
    assert result.get("failed"), result
    assert "secret-file" in result["msg"] and "FAILED" in result["msg"]
    assert "Authorization" in result["msg"] or "authorized" in result["msg"], result["msg"]
    assert not output(worker, "secret").exists() or output(worker, "secret").read_text() == ""
    worker.reconcile([])


def before_as_declared(configs: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    return [{"name": name, "config": config} for name, config in configs.items()]


def test_pikit_status_names_each_connector_and_a_failed_task_with_its_reason(worker: LocalWorker) -> None:
    worker.reconcile([file_sink("status-ok", AGGREGATES, output(worker, "ok"))])
    site: Any = OneWorkerSite(worker.url)
    (ok,) = status.connector_parts(site)
    assert (ok.name, ok.details, ok.healthy) == (
        "status-ok",
        {"state": "RUNNING", "tasks": ["RUNNING"]},
        True,
    )

    # A settle longer than the task takes to fail: the reconcile returns when it does.
    failing = [file_sink("status-secret", SECRET, output(worker, "s"))]
    assert worker.reconcile(failing, remove_unlisted=False, settle_seconds=60).get("failed")
    bad = {part.name: part for part in status.connector_parts(site)}["status-secret"]
    assert not bad.healthy and "FAILED" in bad.problems[0]
    worker.reconcile([])

    gone: Any = OneWorkerSite(f"http://127.0.0.1:{free_port()}")
    (down,) = status.connector_parts(gone)
    assert down.name == "workers" and down.problems[0].startswith("down: no worker's REST API answers")
