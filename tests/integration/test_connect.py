"""The connect role on a real Kafka Connect worker: the worker runs the role's own configuration
(templates/connect-distributed.properties.j2) from the kit's Kafka release, talks mTLS to a real
broker as its own principal under the kafka role's ACLs, and the role's kafka_connectors module
reconciles its connectors through the REST API."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pytest
from kafka import KafkaProducer
from pikit_testkit.broker import LocalBroker, free_port
from pikit_testkit.certs import certificate, new_key, pem

from pikit import REPO, status
from pikit.connect import kafka_connectors
from pikit.kafka_admin import kafka_admin
from pikit.modules import from_file

ROLE = REPO / "roles/connect"
GROUP = "pikit-connect"
AGGREGATES = "sensor-aggregates"
SECRET = "sensor-secret"  # a topic the workers have no ACL for
RECORDS = 40


@dataclass
class Worker:
    url: str
    out: Path
    broker: LocalBroker
    tls: dict[str, str]

    def reconcile(
        self, connectors: list[dict[str, Any]], check: bool = False, **given: Any
    ) -> dict[str, Any]:
        params = kafka_connectors.params_with_defaults(
            urls=[self.url], connectors=connectors, wait_timeout=90, **given
        )
        result: dict[str, Any] = kafka_connectors.run(params, check)
        return result

    def configs(self) -> dict[str, dict[str, str]]:
        workers = kafka_connectors.Workers([self.url], time.monotonic() + 30)
        configs: dict[str, dict[str, str]] = workers.configs()
        return configs


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


def render_worker_config(path: Path, broker: LocalBroker, tls_dir: Path, port: int) -> None:
    template = jinja2.Template((ROLE / "templates/connect-distributed.properties.j2").read_text())
    path.write_text(
        template.render(
            ansible_managed="test",
            pikit_connect_group_id=GROUP,
            pikit_connect_principal="connect",
            _kafka_bootstrap=[broker.address],
            _connect_replicas=1,
            connect_exactly_once_source=True,
            connect_address="127.0.0.1",
            connect_rest_port=port,
            connect_tls_dir=str(tls_dir),
        )
    )


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
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
    acls = filters.kafka_default_acls(
        [], "spark", "sensor-readings", [AGGREGATES], [], {"principal": "connect", "group_id": GROUP}
    )
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

    port = free_port()
    render_worker_config(work / "connect-distributed.properties", broker, tls_dir, port)
    log = (work / "connect.log").open("wb")
    java = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", f"{broker.home}/libs/*"]
    proc = subprocess.Popen(
        [
            *java,
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(work / "connect-distributed.properties"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        served = kafka_connectors.run(
            kafka_connectors.params_with_defaults(action="health", urls=[url], wait_timeout=120), False
        )
        assert served["states"] == {}, served
        yield Worker(url, work / "out", broker, tls)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        broker.stop()
        log.close()


def lines(path: Path, count: int, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = path.read_text().splitlines() if path.exists() else []
        if len(found) >= count:
            return found
        time.sleep(0.5)
    return path.read_text().splitlines() if path.exists() else []


def test_a_declared_file_sink_is_created_runs_and_writes_every_record_once(worker: Worker) -> None:
    out = worker.out.with_suffix(".aggregates")
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


def test_a_config_connect_refuses_fails_with_its_message_and_changes_nothing(worker: Worker) -> None:
    before = worker.configs()
    broken = {"name": "no-topics", "config": {"connector.class": "FileStreamSink", "file": str(worker.out)}}
    with pytest.raises(kafka_connectors.ConnectError, match=r"no-topics: topics: .*topics.regex"):
        worker.reconcile([*before_as_declared(before), broken])
    unknown = {"name": "nowhere", "config": {"connector.class": "NoSuchConnector", "topics": AGGREGATES}}
    with pytest.raises(kafka_connectors.ConnectError, match=r"nowhere: .*NoSuchConnector"):
        worker.reconcile([*before_as_declared(before), unknown])
    assert worker.configs() == before


def test_a_changed_config_is_set_and_an_unlisted_connector_removed(worker: Worker) -> None:
    first = file_sink("to-change", AGGREGATES, worker.out.with_suffix(".first"))
    assert worker.reconcile([first], remove_unlisted=False)["created"] == ["to-change"]
    changed = file_sink("to-change", AGGREGATES, worker.out.with_suffix(".second"))
    result = worker.reconcile([changed], remove_unlisted=False)
    assert result["updated"] == ["to-change"] and result["deleted"] == []
    assert worker.configs()["to-change"]["file"].endswith(".second")
    assert len(lines(worker.out.with_suffix(".second"), RECORDS)) == RECORDS

    result = worker.reconcile([])
    assert sorted(result["deleted"]) == sorted(["aggregates-file", "to-change"])
    assert worker.configs() == {}


def test_a_sink_on_a_topic_outside_the_workers_acls_fails_and_the_play_says_why(worker: Worker) -> None:
    result = worker.reconcile([file_sink("secret-file", SECRET, worker.out.with_suffix(".secret"))])
    assert result.get("failed"), result
    assert "secret-file" in result["msg"] and "FAILED" in result["msg"]
    assert "Authorization" in result["msg"] or "authorized" in result["msg"], result["msg"]
    assert (
        not worker.out.with_suffix(".secret").exists() or worker.out.with_suffix(".secret").read_text() == ""
    )
    worker.reconcile([])


def before_as_declared(configs: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    return [{"name": name, "config": config} for name, config in configs.items()]


class OneWorkerSite:
    """What `pikit status` asks of a site about its workers."""

    def __init__(self, url: str) -> None:
        self.endpoint = url.removeprefix("http://")

    def hosts(self, group: str) -> list[str]:
        return ["w1"] if group == "kafka_connect" else []

    def endpoints(self, service: str, hosts: list[str]) -> list[str]:
        assert service == "connect-rest" and hosts == ["w1"]
        return [self.endpoint]


def test_pikit_status_names_each_connector_and_a_failed_task_with_its_reason(worker: Worker) -> None:
    worker.reconcile([file_sink("status-ok", AGGREGATES, worker.out.with_suffix(".ok"))])
    site: Any = OneWorkerSite(worker.url)
    (ok,) = status.connector_parts(site)
    assert (ok.name, ok.details, ok.healthy) == (
        "status-ok",
        {"state": "RUNNING", "tasks": ["RUNNING"]},
        True,
    )

    worker.reconcile(
        [file_sink("status-secret", SECRET, worker.out.with_suffix(".s"))], remove_unlisted=False
    )
    bad = {part.name: part for part in status.connector_parts(site)}["status-secret"]
    assert not bad.healthy and "FAILED" in bad.problems[0]
    worker.reconcile([])

    gone: Any = OneWorkerSite(f"http://127.0.0.1:{free_port()}")
    (down,) = status.connector_parts(gone)
    assert down.name == "workers" and down.problems[0].startswith("down: no worker's REST API answers")
