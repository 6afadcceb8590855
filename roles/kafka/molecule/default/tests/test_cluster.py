"""Verify a Kafka cluster converged by the kafka role in the lab (molecule verify).

Runs on the controller against real brokers in lab containers, with kafka-python
over mTLS and the certificates the pki role issued. The scenario describes its
nodes in KAFKA_TEST_NODES as name=ip:roles (c controller, b broker).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import KafkaException as ConfluentKafkaException
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAuthorizationFailedError
from pikit_testkit import molecule_lab
from pikit_testkit.certs import certificate, new_key, pem
from pikit_testkit.molecule_lab import (
    AckedProducer,
    assert_every_ack_once_in_order,
    planned_active,
    playbook,
    podman,
    producing,
    restarts,
)
from pikit_testkit.polling import wait_for

from pikit.tlsscan import scan

NODES = [
    (name, address.split(":")[0], address.split(":")[1])
    for name, address in (
        item.split("=") for item in os.environ.get("KAFKA_TEST_NODES", "").split(",") if item
    )
]
BROKERS = [name for name, _, roles in NODES if "b" in roles]
BOOTSTRAP = [f"{ip}:9092" for _, ip, roles in NODES if "b" in roles]
PKI = Path(os.environ.get("PIKIT_STATE_DIR", "/nonexistent")) / "pki"
READINGS = "sensor-readings"
# The lab's SASL_SSL listener and its SCRAM user (inventory/lab/group_vars/all.yml).
SASL_PORT = int(os.environ.get("KAFKA_TEST_SASL_PORT", "0"))
SCRAM_USER = "dashboard"

if not NODES or not SASL_PORT:
    pytest.fail(
        "no lab to verify: KAFKA_TEST_NODES or KAFKA_TEST_SASL_PORT is unset (run through molecule)",
        pytrace=False,
    )


# Writes into the pipeline's own topics, as a principal that only the molecule scenarios issue: the
# e2e suite, which runs this verifier on its own lab (combined mode, like default), leaves it out.
site_topics = pytest.mark.site_topics


def ssl_options(principal: str | None = "admin", ca: Path | None = None) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap_servers": BOOTSTRAP,
        "security_protocol": "SSL",
        "ssl_cafile": str(ca or PKI / "ca.crt"),
        "ssl_check_hostname": True,
    }
    if principal:
        options["ssl_certfile"] = str(PKI / "clients" / f"{principal}.pem")
    return options


def wait_healthy(timeout: int = 240, disk_warn_share: float = 0.85) -> dict[str, Any]:
    return molecule_lab.wait_healthy(BOOTSTRAP, PKI, len(BROKERS), timeout, disk_warn_share)


def new_topic(name: str, partitions: int = 3) -> None:
    admin = KafkaAdminClient(**ssl_options())
    try:
        admin.create_topics([NewTopic(name, partitions, min(3, len(BROKERS)))])
    finally:
        admin.close()


def consume_all(topic: str) -> list[tuple[bytes, bytes]]:
    return molecule_lab.consume_all(topic, ssl_options())


@pytest.fixture(scope="module", autouse=True)
def healthy_cluster() -> Iterator[None]:
    wait_healthy()
    yield


def test_mtls_produce_and_consume_with_a_pki_certificate() -> None:
    new_topic("verify-roundtrip", 1)
    producer = KafkaProducer(**ssl_options(), acks="all")
    producer.send("verify-roundtrip", key=b"pi", value=b"over mTLS").get(timeout=60)
    producer.close()
    assert consume_all("verify-roundtrip") == [(b"pi", b"over mTLS")]


def _refused(**options: Any) -> None:
    with pytest.raises(KafkaError):
        producer = KafkaProducer(**options, bootstrap_timeout_ms=10000, max_block_ms=10000)
        try:
            producer.send(READINGS, b"x").get(timeout=15)
        finally:
            producer.close(timeout=5)


def test_a_client_without_a_certificate_is_refused() -> None:
    _refused(**ssl_options(principal=None))


def test_a_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    rogue_key, client_key = new_key(), new_key()
    rogue_ca = certificate("rogue CA", rogue_key, "rogue CA", rogue_key, ca=True)
    # Same CN as the real admin: only the issuing CA differs.
    client = certificate("admin", client_key, "rogue CA", rogue_key)
    bundle = tmp_path / "rogue-admin.pem"
    bundle.write_bytes(pem(client_key, client, rogue_ca))
    options = ssl_options(principal=None)
    options["ssl_certfile"] = str(bundle)
    _refused(**options)


# Ports that the site's firewall keeps from the controller, where this verifier runs (the e2e lab's:
# the controller and replication listeners, which only Kafka nodes reach): not scanned from here.
FIREWALLED = {int(port) for port in os.environ.get("KAFKA_TEST_FIREWALLED_PORTS", "").split(",") if port}


def listeners() -> list[str]:
    """Every TLS listener of the layout: controllers' 9093, brokers' client 9092 and internal 9094."""
    ports = {"c": [9093], "b": [9092, 9094, SASL_PORT]}
    return [
        f"{ip}:{port}"
        for _, ip, roles in NODES
        for role in roles
        for port in ports[role]
        if port not in FIREWALLED
    ]


@pytest.mark.parametrize("address", listeners())
def test_every_listener_offers_tls13_and_tls12_with_forward_secret_aead_only(address: str) -> None:
    offer = scan(address, PKI / "ca.crt", PKI / "clients" / "admin.pem")
    print(f"\n{address}: {sorted(offer.protocols)}; { ({p: sorted(s) for p, s in offer.suites.items()}) }")
    assert offer.protocols == {"TLSv1.2", "TLSv1.3"}, f"{address} offers {sorted(offer.protocols)}"
    assert offer.suites.get("TLSv1.2") and offer.suites.get("TLSv1.3"), f"{address}: {offer.suites}"
    assert offer.weaker_than_aead() == [], f"{address} offers {offer.weaker_than_aead()}"


def scram_options(password: str | None = None) -> dict[str, Any]:
    return {
        "bootstrap_servers": [f"{ip}:{SASL_PORT}" for _, ip, roles in NODES if "b" in roles],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": SCRAM_USER,
        "sasl_plain_password": password or scram_password(),
        "ssl_cafile": str(PKI / "ca.crt"),
        "ssl_check_hostname": True,
    }


def scram_password() -> str:
    path = PKI.parent / "kafka" / "scram" / SCRAM_USER
    assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    return path.read_text().strip()


def librdkafka_scram(password: str | None = None) -> dict[str, str]:
    """librdkafka's settings (kcat's and confluent-kafka's library) for the SCRAM listener."""
    return {
        "bootstrap.servers": ",".join(f"{ip}:{SASL_PORT}" for _, ip, roles in NODES if "b" in roles),
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": SCRAM_USER,
        "sasl.password": password or scram_password(),
        "ssl.ca.location": str(PKI / "ca.crt"),
    }


def librdkafka_read(topic: str, password: str | None = None) -> list[bytes]:
    consumer = Consumer(
        {**librdkafka_scram(password), "group.id": "dashboard-librdkafka", "auto.offset.reset": "earliest"}
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        idle = time.monotonic() + 90  # the first record: the group's coordinator may still be moving
        while time.monotonic() < idle:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                raise RuntimeError(str(message.error()))
            values.append(message.value())
            idle = time.monotonic() + 5
    finally:
        consumer.close()
    return values


@site_topics
def test_a_scram_user_reads_what_its_acls_allow_with_kafka_python_and_librdkafka() -> None:
    marker = f"scram-check-{time.time()}".encode()
    producer = KafkaProducer(**ssl_options(), acks="all")
    producer.send("sensor-aggregates", key=b"verify", value=marker).get(timeout=60)
    producer.close()
    consumer = KafkaConsumer(
        "sensor-aggregates", **scram_options(), group_id="dashboard-verify", auto_offset_reset="earliest"
    )
    try:
        # Until the marker, not until a quiet spell: after the restarts of the tests before, the
        # group's coordinator may answer NotCoordinator for longer than any quiet spell (15 s was
        # too short beside the end-to-end lab at af7076d).
        wait_for(
            "kafka-python over SCRAM to read the marker",
            lambda: any(r.value == marker for rs in consumer.poll(timeout_ms=1000).values() for r in rs),
            timeout=90,
            every=0,
        )
    finally:
        consumer.close()
    assert marker in librdkafka_read("sensor-aggregates"), "librdkafka over SCRAM did not read it"
    # Read-only: its ACLs give it no write. Idempotence off, or kafka-python 3 asks for a producer id
    # first and the refusal comes from the missing IdempotentWrite, not from the topic ACL tested here.
    scram_producer = KafkaProducer(
        **scram_options(), acks="all", max_block_ms=20000, enable_idempotence=False
    )
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            scram_producer.send("sensor-aggregates", b"forged").get(timeout=60)
    finally:
        scram_producer.close(timeout=10)


def _librdkafka_refuses(password: str) -> bool:
    """Whether librdkafka's login with this password is refused. The client is freed before
    this returns: librdkafka retries in the background for as long as a client lives, and a
    leaked one would knock on the brokers for the rest of the run."""
    admin = AdminClient(librdkafka_scram(password))
    try:
        admin.list_topics(timeout=10)
    except ConfluentKafkaException:
        return True
    finally:
        del admin
    return False


def test_a_wrong_scram_password_is_refused() -> None:
    with pytest.raises(KafkaError):
        KafkaAdminClient(**scram_options("not-the-password-1"), bootstrap_timeout_ms=10000)
    assert _librdkafka_refuses("not-the-password-1")


@site_topics
def test_an_edge_device_may_produce_readings_and_nothing_else() -> None:
    producer = KafkaProducer(**ssl_options("edge-sim"), acks="all", max_block_ms=20000)
    try:
        metadata = producer.send(READINGS, key=b"edge-sim", value=b'{"v": 1}').get(timeout=60)
        assert metadata.topic == READINGS
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("sensor-aggregates", key=b"edge-sim", value=b"forged").get(timeout=60)
    finally:
        producer.close(timeout=10)


def test_topics_exist_with_the_declared_settings() -> None:
    admin = KafkaAdminClient(**ssl_options())
    try:
        topics = {t["name"]: t for t in admin.describe_topics()}
    finally:
        admin.close()
    for name, partitions in {
        READINGS: 6,
        "sensor-aggregates": 3,
        "sensor-alerts": 3,
        "sensor-dead-letter": 1,
        "sensor-late": 1,
    }.items():
        assert len(topics[name]["partitions"]) == partitions
        assert len(topics[name]["partitions"][0]["replica_nodes"]) == min(3, len(BROKERS))


def _leader_of_partition_0(topic: str) -> str:
    admin = KafkaAdminClient(**ssl_options())
    try:
        leader_id = admin.describe_topics([topic])[0]["partitions"][0]["leader_id"]
        brokers = {b["broker_id"]: b["host"] for b in admin.describe_cluster()["brokers"]}
    finally:
        admin.close()
    return next(name for name, ip, _ in NODES if ip == brokers[leader_id])


# The broker fault tests take minutes; they run in the dedicated scenario (make test-ops). Combined
# mode's faults (every broker killed -9, the whole pipeline judged) are in the e2e fault suite.
faults = pytest.mark.skipif(
    os.environ.get("KAFKA_TEST_FAULTS") != "1", reason="broker faults run in the dedicated scenario"
)
# A test of several converges under a producer (the config-change restart): make test-ops runs it
# on dedicated controllers (molecule_lab.ops_only). The CA rotation is the e2e suite's
# (test_security.py), which also keeps a client of each step's files producing through it and
# judges the whole pipeline.
ops = molecule_lab.ops_only


@faults
def test_sigkill_of_a_broker_loses_no_acknowledged_record() -> None:
    topic = "verify-sigkill"
    new_topic(topic)
    victim = _leader_of_partition_0(topic)
    sender = AckedProducer(ssl_options())
    for i in range(3000):
        sender.send(topic)
        if i == 1000:
            podman("exec", victim, "pkill", "-9", "-f", "kafka.Kafka")
        time.sleep(0.002)
    sender.close()
    consumed = consume_all(topic)
    print(
        f"SIGKILL {victim}: sent {sender.sent}, acknowledged {len(sender.acked)}, "
        f"failed {sender.failed}, consumed {len(consumed)}"
    )
    assert len(sender.acked) > 1000
    assert_every_ack_once_in_order(sender.acked, consumed)
    wait_healthy()  # systemd brings the killed broker back (Restart=on-failure)


# A test that runs Kafka's converge again: a minute or more each on a loaded lab, which the e2e
# suite's run of this verifier, on make test's critical path, leaves to make test-ops.
reconverge = pytest.mark.reconverge


def converge(extra_vars: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Run Kafka's part of the scenario's converge again (playbooks/kafka.yml and the verifier's
    client certificates), as a user would, with extra vars: what these tests change is Kafka's."""
    return playbook(Path(os.environ["KAFKA_TEST_CONVERGE"]), extra_vars)


@reconverge
def test_a_node_given_another_id_is_refused_before_anything_changes() -> None:
    """Node ids follow inventory order unless set, so removing or moving a host renumbers the
    others. Two brokers given each other's id stop the run before any node changes, each named."""
    first, second = BROKERS[-2], BROKERS[-1]
    ids = {first: _broker_id(first), second: _broker_id(second)}
    inventory = Path(
        os.environ.get("MOLECULE_INVENTORY_FILE") or f"{os.environ['MOLECULE_EPHEMERAL_DIRECTORY']}/inventory"
    )
    host_vars = (inventory if inventory.is_dir() else inventory.parent) / "host_vars"
    host_vars.mkdir(exist_ok=True)
    swapped = {first: ids[second], second: ids[first]}
    before = {name: _active_since(name) for name, _, _ in NODES}
    try:
        for host, node_id in swapped.items():
            (host_vars / f"{host}.yml").write_text(f"kafka_node_id: {node_id}\n")
        run = converge({})
    finally:
        for host in swapped:
            (host_vars / f"{host}.yml").unlink(missing_ok=True)
    assert run.returncode != 0
    for host in swapped:
        assert (
            f"{host}'s storage (/srv/pikit/kafka/data/meta.properties) is node.id={ids[host]}" in run.stdout
        )
    assert {name: _active_since(name) for name, _, _ in NODES} == before, "a node was restarted"


@reconverge
def test_a_node_that_lost_its_storage_is_reported_not_reformatted() -> None:
    victim = BROKERS[-1]
    podman("exec", victim, "systemctl", "stop", "kafka")
    podman("exec", victim, "mv", "/srv/pikit/kafka/data", "/srv/pikit/kafka/data.lost")
    try:
        run = converge({})
        assert run.returncode != 0
        assert f"{victim} was formatted into cluster" in run.stdout
        listing = podman("exec", victim, "ls", "/srv/pikit/kafka/").split()
        assert listing == ["data.lost"], f"the node was touched: {listing}"
    finally:
        podman("exec", victim, "rm", "-rf", "/srv/pikit/kafka/data")
        podman("exec", victim, "mv", "/srv/pikit/kafka/data.lost", "/srv/pikit/kafka/data")
        podman("exec", victim, "systemctl", "start", "kafka")
    wait_healthy()


def _active_since(node: str) -> float:
    stamp = podman(
        "exec", node, "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "--value", "kafka"
    )
    return int(stamp.strip()) / 1e6


def _pending(node: str) -> str:
    return podman("exec", node, "cat", "/var/lib/pikit/restart-pending/kafka.json")


# Two runs of kafka.yml and a health-gated restart of every node: 580 s beside the end-to-end lab
# on five nodes at a942b75. make test-ops runs it on kafka/dedicated, whose controllers must restart
# first; make test keeps the restart plan's unit tests (tests/unit/test_rolling_restart_filters.py),
# and the end-to-end CA rotation restarts every combined node through the same pattern.
@pytest.mark.timeout(1200)
@ops
def test_a_config_change_restarts_one_node_at_a_time_losing_nothing() -> None:
    """With kafka_restart=never the change is converged and every node stays marked; the next run
    (auto) restarts them, controllers first, for the reason kept in the marker."""
    topic = "verify-rolling"
    new_topic(topic)
    change = {"kafka_server_properties_extra": {"log.cleaner.threads": "2"}}
    before = {name: _active_since(name) for name, _, _ in NODES}
    held = converge({**change, "kafka_restart": "never"})
    assert held.returncode == 0, held.stdout[-4000:]
    assert restarts(held) == [], "kafka_restart=never restarted a node"
    assert "kafka: left pending (restart mode never)" in held.stdout
    assert {name: _active_since(name) for name, _, _ in NODES} == before
    assert all('"server.properties"' in _pending(name) for name, _, _ in NODES)

    wait_healthy()
    sender = AckedProducer(ssl_options())
    with producing(sender, topic):
        run = converge(change)  # nothing changes now: the markers alone restart the nodes
    assert run.returncode == 0, run.stdout[-4000:]
    steps = restarts(run)
    assert {reasons for _, reasons in steps} == {"server.properties"}, steps
    restarted = [host for host, _ in steps]
    assert sorted(restarted) == sorted(name for name, _, _ in NODES), restarted
    after = {name: _active_since(name) for name, _, _ in NODES}
    assert all(after[n] > before[n] for n in after), "every node restarted"
    order = sorted(after, key=after.get)  # type: ignore[arg-type]
    assert order == restarted, "restarts happened in the announced order, one at a time"
    controllers_first = [n for n, _, roles in NODES if roles == "c"]
    assert order[: len(controllers_first)] == [n for n in restarted if n in controllers_first]
    voters = [n for n, _, roles in NODES if "c" in roles]
    # The leader the order was made from: a starved node's quorum may elect another between any
    # look of the test's own and the run's (kafka-2 against kafka-1 in make test-ops, 2026-12-05).
    active = planned_active(run)
    assert active in voters, f"the run named {active} as the active controller"
    assert [n for n in restarted if n in voters][-1] == active, "the active controller restarts last"
    for name, _, _ in NODES:
        with pytest.raises(subprocess.CalledProcessError):
            _pending(name)  # cleared once restarted
    consumed = consume_all(topic)
    print(f"rolling restart: sent {sender.sent}, acknowledged {len(sender.acked)}, failed {sender.failed}")
    assert_every_ack_once_in_order(sender.acked, consumed)


# The scenario gives this broker a 256 MiB data disk (molecule.yml, lab_tmpfs).
SMALL_DISK = os.environ.get("KAFKA_TEST_SMALL_DISK", "")


def _topic_config(topic: str) -> dict[str, str]:
    admin = KafkaAdminClient(**ssl_options())
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        admin.close()
    return {k: v["value"] for k, v in described["topic"][topic].items()}


def _log_size(broker_id: int, topic: str, partition: int) -> int:
    admin = KafkaAdminClient(**ssl_options())
    try:
        (described,) = admin.describe_log_dirs({topic: [partition]}, brokers=[broker_id])
    finally:
        admin.close()
    return sum(
        p["partition_size"] for d in described["log_dirs"] for t in d["topics"] for p in t["partitions"]
    )


def _broker_id(name: str) -> int:
    properties = podman("exec", name, "cat", "/srv/pikit/kafka/data/meta.properties")
    return int(next(line for line in properties.splitlines() if line.startswith("node.id=")).split("=")[1])


@faults
def test_a_small_data_disk_sizes_the_topics_and_drops_the_oldest_segments_first() -> None:
    """The disk guard sized every topic from the smallest broker's disk; writing three times a
    partition's bound into it, the broker keeps running, the oldest records go and the newest
    stay, and the partition shrinks back under its bound. Filled past kafka_disk_warn_share, the
    disk shows in the health report as a warning, not as a failed gate."""
    assert SMALL_DISK, "KAFKA_TEST_SMALL_DISK names the broker with the small data disk (molecule.yml)"
    config = _topic_config(READINGS)
    retention, segment = int(config["retention.bytes"]), int(config["segment.bytes"])
    share = 0.5  # kafka_disk_share's default
    assert retention + segment <= 256 * 2**20 * share * 8 / 56, "the readings topic's part of the small disk"
    assert segment < 256 * 2**20, "a segment small enough that a partition keeps several"
    victim = _broker_id(SMALL_DISK)
    producer = KafkaProducer(**ssl_options(), acks="all", linger_ms=20, batch_size=262144)
    payload_size = 10_000
    count = 3 * (retention + segment) // payload_size
    try:
        for i in range(count):
            producer.send(READINGS, value=f"{i:08d}".encode() + os.urandom(payload_size - 8), partition=0)
        producer.flush(timeout=120)
    finally:
        producer.close()
    started = time.time()
    consumer = KafkaConsumer(**ssl_options())
    tp = TopicPartition(READINGS, 0)
    seen: dict[str, int] = {}

    def trimmed() -> bool:
        # The small-disk broker is busy deleting segments just after the flood; on CI's loaded
        # cores one offsets request ran past its 30 s, so a timeout here means "not yet".
        seen["first"] = consumer.beginning_offsets([tp])[tp]
        seen["size"] = _log_size(victim, READINGS, 0)
        return seen["first"] > 0 and seen["size"] <= retention + segment

    try:
        with contextlib.suppress(AssertionError):  # the assertions below say which bound was missed
            wait_for("the oldest segments deleted", trimmed, timeout=300, every=5, tolerate=(KafkaError,))
        first, size = seen.get("first", 0), seen.get("size", -1)
        last = wait_for(
            "the partition's end offset",
            lambda: consumer.end_offsets([tp])[tp],
            timeout=120,
            tolerate=(KafkaError,),
        )
        consumer.assign([tp])
        consumer.seek(tp, last - 1)
        polled = wait_for("the newest record", lambda: consumer.poll(timeout_ms=10000), timeout=120)
        newest = next(iter(polled.values()))[-1].value
    finally:
        consumer.close()
    print(
        f"disk guard: retention.bytes {retention:,}, segment.bytes {segment:,}; wrote "
        f"{count * payload_size:,} bytes; after {time.time() - started:.0f}s partition 0 holds {size:,} bytes"
        f" from offset {first}"
    )
    assert first > 0, "the oldest segments were deleted"
    assert size <= retention + segment, "the partition is back under its bound"
    assert newest[:8] == f"{count - 1:08d}".encode(), "the newest record stays"
    for name in BROKERS:
        assert podman("exec", name, "systemctl", "is-active", "kafka").strip() == "active"

    ballast = "/srv/pikit/kafka/ballast"
    free = int(podman("exec", SMALL_DISK, "df", "-B1", "--output=avail", "/srv/pikit/kafka").split()[-1])
    podman("exec", SMALL_DISK, "fallocate", "-l", str(free - 16 * 2**20), ballast)
    try:
        report = wait_healthy(timeout=60)
        warnings = report["disk_warnings"]
        assert any(w.startswith(f"broker {victim}: disk of /srv/pikit/kafka/data is ") for w in warnings), (
            warnings
        )
        assert report["healthy"], "a full disk warns; the gate still passes"
    finally:
        podman("exec", SMALL_DISK, "rm", "-f", ballast)
    assert not wait_healthy(timeout=60)["disk_warnings"]
