"""`pikit status` against a real broker on loopback, with a site inventory and a controller state of
its own: what it reads from the admin API and from the readings topic, and a broker that stops."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from pikit_contract import signing
from pikit_contract.brokers import PROBE_TIMEOUT_S
from pikit_contract.readings import RELEASE_HEADER, SPOOL_HEADER
from pikit_testkit.broker import LocalBroker
from pikit_testkit.certs import certificate, new_key, pem

from pikit import latest
from pikit.site import Site, SiteError
from pikit.status import collect
from pikit.topic import mtls_client
from tests.conftest import run_preflight

SECRET = b"status-test-site-secret"
READINGS_PARTITIONS = 6


def send(
    producer: KafkaProducer,
    key: str,
    signer: str | None,
    depth: int,
    release: bytes = b"0.9.1",
    **kwargs: Any,
) -> None:
    """A reading's record keyed `key`, signed by `signer` (None: unsigned), with the agent's headers."""
    value = json.dumps({"device": key, "seq": depth}).encode()
    headers = [(RELEASE_HEADER, release), (SPOOL_HEADER, str(depth).encode())]
    if signer is not None:
        headers += signing.headers(signer, signing.device_key(SECRET, signer), value)
    producer.send("sensor-readings", key=key.encode(), value=value, headers=headers, **kwargs)


# One broker and one preflight for the module (each about 50 s on a busy CI machine); the last
# test stops the broker.
@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, LocalBroker, Path]]:
    tmp_path = tmp_path_factory.mktemp("status")
    ca_key, key, device_key = new_key(), new_key(), new_key()
    pki = tmp_path / "state/pki"
    (pki / "clients").mkdir(parents=True)
    (pki / "ca.crt").write_bytes(pem(None, certificate("it CA", ca_key, "it CA", ca_key, ca=True)))
    # The admin identity is the broker's super user; edge-1's certificate runs out in 10 days.
    bundle = pki / "clients/admin.pem"
    bundle.write_bytes(pem(key, certificate("bench", key, "it CA", ca_key, ip="127.0.0.1")))
    (pki / "issued").mkdir()
    (pki / "issued/edge-1-edge-agent.crt").write_bytes(
        pem(None, certificate("edge-1", device_key, "it CA", ca_key, days=10))
    )
    broker = LocalBroker(tmp_path / "kafka", tls=(bundle, pki / "ca.crt"), short_lived=True)
    broker.start()
    # Partitioned as the kit makes it, so that a record can lie outside its device's partition.
    admin = KafkaAdminClient(**mtls_client([broker.address], pki))
    try:
        admin.create_topics([NewTopic("sensor-readings", READINGS_PARTITIONS, replication_factor=1)])
    finally:
        admin.close()
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        f"""all:
  vars: {{pikit_kafka_client_port: {broker.port}}}
  children:
    kafka_controller: {{hosts: {{b1: {{ansible_host: 127.0.0.1}}}}}}
    kafka_broker: {{hosts: {{b1: }}}}
    edge: {{hosts: {{edge-1: {{ansible_host: 10.0.0.21}}, edge-2: {{ansible_host: 10.0.0.22}}}}}}
"""
    )
    # The site secret the devices' keys derive from (pikit_device_signing_secret_file).
    (tmp_path / "state/device-signing-secret").write_text(SECRET.decode() + "\n")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("PIKIT_STATE_DIR", str(tmp_path / "state"))
        # The site model, as every playbook run leaves it for the controller's tools.
        assert run_preflight(inventory).startswith("OK")
        yield Site.load(inventory), broker, pki
    if broker.proc is not None:
        broker.stop()


def test_the_broker_the_quorum_and_each_device_from_what_it_sent(
    site: tuple[Site, LocalBroker, Path],
) -> None:
    found, broker, pki = site
    producer = KafkaProducer(**mtls_client([broker.address], pki), acks="all")
    for depth in (30, 17):
        send(producer, "edge-1", "edge-1", depth)
    producer.flush()
    producer.close()

    status = collect(found, silent_after=60)
    (b1,) = status.brokers
    assert b1.healthy and b1.details["up"] and b1.details["node_id"] == 1
    assert b1.details["partitions"] >= 1 and b1.details["urp"] == 0
    assert status.quorum.healthy and status.quorum.details["leader_host"] == "b1"
    assert [v["id"] for v in status.quorum.details["voters"]] == [1]
    edge1, edge2 = status.agents
    assert edge1.details["version"] == "0.9.1" and edge1.details["spool"] == 17
    assert edge1.details["last_reading_s_ago"] < 60
    assert edge1.problems == ["certificate expires in 10 days"]
    assert edge2.problems == ["silent: no reading in Kafka for more than 15 min"]
    assert status.spark == []
    assert sorted(status.problems) == [
        "agent edge-1: certificate expires in 10 days",
        "agent edge-2: silent: no reading in Kafka for more than 15 min",
    ]


def test_a_forged_or_unsigned_record_never_changes_what_status_shows_of_a_device(
    site: tuple[Site, LocalBroker, Path],
) -> None:
    """edge-2 stolen: with its certificate and key, a record that claims edge-1, later in time, with
    a larger seq and another release and spool; an unsigned one; and one signed with edge-1's own
    key, outside edge-1's partition (which the apps dead-letter). edge-1 stays as it was; the
    thief is the one named."""
    found, broker, pki = site
    before = collect(found, silent_after=60).agents[0].details
    producer = KafkaProducer(**mtls_client([broker.address], pki), acks="all")
    later = int((time.time() + 3600) * 1000)
    send(producer, "edge-1", "edge-2", 999, release=b"6.6.6", timestamp_ms=later)
    send(producer, "edge-1", None, 0, release=b"6.6.6", timestamp_ms=later)
    elsewhere = (signing.home_partition("edge-1", READINGS_PARTITIONS) + 1) % READINGS_PARTITIONS
    send(producer, "edge-1", "edge-1", 999, release=b"6.6.6", timestamp_ms=later, partition=elsewhere)
    producer.flush()
    producer.close()

    status = collect(found, silent_after=60)
    edge1, edge2 = status.agents
    assert {k: edge1.details[k] for k in ("version", "spool")} == {"version": "0.9.1", "spool": 17}
    assert edge1.details["last_reading_s_ago"] >= before["last_reading_s_ago"] >= 0
    assert edge1.problems == ["certificate expires in 10 days"]
    assert edge2.details["forged_records"] == 1  # the signer is shown, the device it claimed is not touched
    assert edge2.problems == ["silent: no reading in Kafka for more than 15 min"]
    assert "spool" not in edge2.details  # its forgery says nothing of its own readings


def test_a_hung_broker_is_named_down_within_the_probes_bound(site: tuple[Site, LocalBroker, Path]) -> None:
    """SIGSTOPped, as a hung JVM or a stalled SD card leaves it: its kernel still takes the
    connection, and a client's TLS handshake would wait for as long as it hangs."""
    found, broker, pki = site
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        status = collect(found, silent_after=60)
        took = time.monotonic() - started
        with pytest.raises(SiteError, match="no broker"):
            latest.read(found, pki=pki)
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    (b1,) = status.brokers
    assert b1.problems == [f"down: no answer on 127.0.0.1:{broker.port} within {PROBE_TIMEOUT_S:.0f} s"]
    assert status.quorum.problems == [f"no broker answers on port {broker.port}: the cluster is down"]
    assert took < PROBE_TIMEOUT_S + 15, f"pikit status took {took:.1f} s on a hung broker"
    # Thawed, it is believed again.
    assert collect(found, silent_after=60).brokers[0].details["up"]
    # A controller that holds no identity of the cluster (no site.yml run from it yet) says so.
    with pytest.raises(SiteError, match=r"admin\.pem is missing"):
        latest.read(found, pki=pki.parent / "elsewhere")


def test_a_stopped_broker_is_named_down(site: tuple[Site, LocalBroker, Path]) -> None:
    found, broker, _ = site
    broker.stop()
    status = collect(found, silent_after=60)
    (b1,) = status.brokers
    assert b1.problems == [f"down: no answer on 127.0.0.1:{broker.port} within {PROBE_TIMEOUT_S:.0f} s"]
    assert status.quorum.problems == [f"no broker answers on port {broker.port}: the cluster is down"]
    # The devices are not blamed for what Kafka cannot tell (edge-1's certificate still is).
    assert [a.details["last_reading"] for a in status.agents] == ["unknown: no broker answers"] * 2
    assert [a.problems for a in status.agents] == [["certificate expires in 10 days"], []]
