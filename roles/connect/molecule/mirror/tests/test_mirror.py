"""Verify a site's mirror to its core (molecule verify, make test-ops): two pikit clusters, each
with its own CA, converged by the kit's playbooks; the site's edge agent produces readings all along,
and the site's worker mirrors them, the aggregates and the alerts to the core. No Spark runs here:
transactional writers stand in for the apps, every third transaction aborted, which read_committed
must hide. Judged as a user would: the core's copy, read_committed, equals the site's topic record
by record in each partition's order, after an uplink cut and after a kill -9 of the worker too
(for the readings, which the agent goes on sending, up to where the copy reached and at least all
the site had when the fault ended); the core refuses the site outside its prefix; the file sink
beside the mirror holds what committed."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import testinfra
from ansible_collections.pikit.cluster.plugins.modules import kafka_connectors
from cryptography import x509
from kafka import KafkaProducer
from kafka.errors import KafkaError
from pikit_testkit.mirror import caught_up, difference, records, settled, transactions
from pikit_testkit.molecule_lab import changed, playbook

from pikit import REPO
from pikit.topic import mtls_client, read_to_end

SCENARIO = Path(__file__).resolve().parents[1]
SITE_STATE = Path(os.environ.get("MIRROR_SITE_STATE", "/nonexistent"))
CORE_STATE = Path(os.environ.get("MIRROR_CORE_STATE", "/nonexistent"))
WORKER = os.environ.get("MIRROR_WORKER", "")
CUT_SECONDS = float(os.environ.get("MIRROR_CUT_SECONDS", "600"))
TOPIC = "sensor-aggregates"
COPY = f"greenhouse.{TOPIC}"
ALERTS = "sensor-alerts"
# The edge agent's topic: mirrored too (connect_mirror's raw_readings), while the agent produces.
READINGS = "sensor-readings"
OUT = "/srv/pikit/kafka-connect/sensor-aggregates.jsonl"
LAG_METRICS = "/var/lib/prometheus/node-exporter/pikit_mirror.prom"
# The bound: every record of the site on the core within 2 minutes of the uplink's return.
HEALED_WITHIN = 120.0

if not WORKER:
    pytest.fail("no lab to verify: MIRROR_WORKER is unset (run through molecule)", pytrace=False)


def site() -> dict[str, Any]:
    return mtls_client(os.environ["MIRROR_SITE_BROKERS"].split(","), SITE_STATE / "pki")


def core() -> dict[str, Any]:
    return mtls_client(os.environ["MIRROR_CORE_BROKERS"].split(","), CORE_STATE / "pki")


def worker() -> Any:
    """The worker's node, as root through sudo: the lab logs in as `pi`, as on a Pi, and this
    scenario's molecule inventory (create, destroy, the verifier) carries no ansible_become."""
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    return testinfra.get_host(f"ansible://{WORKER}?ansible_inventory={inventory}", sudo=True)


def connectors() -> Any:
    url = f"http://{os.environ['MIRROR_WORKER_ADDRESS']}:8083"
    return kafka_connectors.Workers([url], time.monotonic() + 30)


def mirror_running(timeout: float) -> dict[str, Any]:
    """The mirror's states once both its connectors and their tasks run, or when the timeout passed."""
    deadline = time.monotonic() + timeout
    states: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            states = connectors().states()
        except Exception as error:  # the worker is restarting
            states = {"(the REST API)": {"connector": str(error)}}
        if not kafka_connectors.unsettled(["greenhouse.mirror", "greenhouse.checkpoints"], states):
            break
        time.sleep(2)
    return states


def lag_metrics() -> dict[str, float]:
    """The worker's probe's last measure for the aggregates: {metric: value}."""
    text = worker().file(LAG_METRICS).content_string
    out = {}
    for line in text.splitlines():
        if line.startswith("pikit_mirror_") and (f'topic="{TOPIC}"' in line or "topic=" not in line):
            name, value = line.split("{", 1)[0], line.rsplit(" ", 1)[1]
            out[name] = float(value)
    return out


def probe_journal() -> str:
    """The probe's last runs, for a failure's message."""
    return str(worker().run("journalctl -u pikit-mirror-lag -n 40 --no-pager").stdout)


def lag_settles(timeout: float) -> dict[str, float]:
    """The probe's measure once it says nothing is behind, or when the timeout passed."""
    deadline = time.monotonic() + timeout
    while True:
        seen = lag_metrics()
        if seen.get("pikit_mirror_lag_records") == 0 or time.monotonic() > deadline:
            return seen
        time.sleep(5)


def test_the_worker_holds_its_key_for_the_core_alone_and_the_core_certified_it() -> None:
    node = worker()
    for name in ("core.key", "core.pem"):
        key = node.file(f"/etc/kafka-connect/tls/{name}")
        assert (key.user, key.mode) == ("kafka-connect", 0o600), name
    cert = x509.load_pem_x509_certificate(node.file("/etc/kafka-connect/tls/core.crt").content)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate((CORE_STATE / "pki/ca.crt").read_bytes()))
    assert cert.subject.rfc4514_string() == "CN=site.greenhouse"
    site_ca = x509.load_pem_x509_certificate((SITE_STATE / "pki/ca.crt").read_bytes())
    assert site_ca.subject != cert.issuer, "the core's own CA, not the site's"


def test_the_core_holds_every_committed_aggregate_of_the_site_once_in_order() -> None:
    transactions(site(), TOPIC, "first", 9)
    want, got, seconds = settled(site(), core(), TOPIC, COPY, timeout=180)
    assert sum(map(len, want.values())) >= 30, "6 of the 9 transactions committed, 5 records each"
    assert got == want, difference(want, got)
    count = sum(map(len, got.values()))
    print(f"\n[mirror] {count} records on the core, equal to the site's in {seconds:.0f} s")


def test_the_probe_measures_the_lag_every_interval_and_finds_none() -> None:
    """The figures MirrorBehind reads are fresh: the timer ran the probe within its last intervals
    (connect_mirror_lag_interval_sec, 30 s), and it found the copy whole."""
    deadline = time.monotonic() + 120
    while True:
        seen = lag_metrics()
        age = time.time() - seen.get("pikit_mirror_lag_timestamp_seconds", 0)
        if (age < 75 and seen.get("pikit_mirror_lag_records") == 0) or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert age < 75, f"the probe last measured {age:.0f} s ago: {seen}\n{probe_journal()}"
    assert seen["pikit_mirror_lag_records"] == 0 and seen["pikit_mirror_lost_records"] == 0, seen


# The cut, the copy's catch-up and the probe's settling: past the verifier's 600 s default.
@pytest.mark.timeout(CUT_SECONDS + 900)
def test_an_uplink_cut_for_ten_minutes_heals_and_the_core_is_whole_within_two() -> None:
    node = worker()
    core_address = os.environ["MIRROR_CORE_ADDRESS"]
    cut = (
        "nft add table inet pikit-uplink-cut && nft add chain inet pikit-uplink-cut out "
        "'{ type filter hook output priority 0; policy accept; }' && "
        f"nft add rule inet pikit-uplink-cut out ip daddr {core_address} drop"
    )
    stop = threading.Event()
    writers = [
        threading.Thread(target=transactions, args=(site(), topic, f"cut-{topic}", 1_000_000, stop))
        for topic in (TOPIC, ALERTS)
    ]
    readings_before = sum(map(len, records(READINGS, site()).values()))
    node.run_expect([0], cut)
    try:
        for writer in writers:
            writer.start()
        time.sleep(CUT_SECONDS)
        during = mirror_running(1)
        lag_during = lag_metrics()
    finally:
        stop.set()
        for writer in writers:
            writer.join()
        node.run_expect([0], "nft delete table inet pikit-uplink-cut")
    agent_sent = sum(map(len, records(READINGS, site()).values())) - readings_before
    restored = time.monotonic()
    copies = {
        topic: caught_up(site(), core(), topic, f"greenhouse.{topic}", timeout=HEALED_WITHIN + 60)
        for topic in (TOPIC, ALERTS, READINGS)
    }
    healed = time.monotonic() - restored
    print(
        f"\n[mirror] uplink cut {CUT_SECONDS:.0f} s; the connectors then: "
        f"{ {name: state.get('connector') for name, state in during.items()} }; the core whole "
        f"{healed:.0f} s after the uplink's return "
        f"({ {topic: sum(map(len, want.values())) for topic, (want, _, _) in copies.items()} } records; "
        f"the agent sent {agent_sent} during the cut)"
    )
    assert agent_sent > 0, "the edge agent sent no readings during the cut"
    for topic, (want, got, _) in copies.items():
        assert got == want, f"{topic}: {difference(want, got)}"
    assert healed <= HEALED_WITHIN, f"the core was whole {healed:.0f} s after the uplink's return"
    # The probe measures every 30 s: behind by about the cut at its end, nothing once healed.
    print(f"[mirror] the probe at the cut's end: {lag_during}")
    assert lag_during["pikit_mirror_lag_seconds"] >= CUT_SECONDS - 90, f"{lag_during}\n{probe_journal()}"
    assert lag_during["pikit_mirror_lag_records"] > 0, lag_during
    after = lag_settles(HEALED_WITHIN)
    assert after["pikit_mirror_lag_records"] == 0 and after["pikit_mirror_lag_seconds"] == 0, after


def test_a_worker_killed_9_mid_transfer_restarts_and_the_copy_stays_exact() -> None:
    node = worker()
    stop = threading.Event()
    writer = threading.Thread(target=transactions, args=(site(), TOPIC, "kill", 1_000_000, stop))
    writer.start()
    try:
        time.sleep(5)
        node.run_expect([0], "systemctl kill -s KILL kafka-connect")
        time.sleep(10)
    finally:
        stop.set()
        writer.join()
    states = mirror_running(180)
    assert not kafka_connectors.unsettled(["greenhouse.mirror"], states), states
    for topic in (TOPIC, READINGS):
        want, got, seconds = caught_up(site(), core(), topic, f"greenhouse.{topic}", timeout=180)
        assert got == want, f"the core's copy of {topic} after the kill: {difference(want, got)}"
        print(f"\n[mirror] after the kill -9, the core's {topic} equal to the site's in {seconds:.0f} s")


def test_the_core_refuses_the_site_outside_its_prefix() -> None:
    with tempfile.TemporaryDirectory() as work:
        identity = Path(work) / "site.pem"
        identity.write_bytes(worker().file("/etc/kafka-connect/tls/core.pem").content)
        identity.chmod(0o600)
        producer = KafkaProducer(**{**core(), "ssl_certfile": str(identity)}, max_block_ms=15_000, retries=0)
        try:
            for topic in ("sensor-aggregates", "school.sensor-aggregates"):
                with pytest.raises(KafkaError):
                    producer.send(topic, b"x").get(timeout=15)
        finally:
            producer.close(timeout=5)
    assert records("sensor-aggregates", core()) == {}, "nothing reached the core's own topic"


def test_the_file_sink_beside_the_mirror_holds_every_committed_aggregate_and_no_aborted_one() -> None:
    """Kafka's file sink is at least once: a worker killed -9 writes again what followed its last
    commit of offsets (offset.flush.interval.ms), so the file holds each committed record once or
    more, and nothing else."""
    in_topic = {r.value.decode() for r in read_to_end(TOPIC, **site())}
    deadline = time.monotonic() + 120
    written: list[str] = []
    while time.monotonic() < deadline:
        file = worker().file(OUT)
        written = file.content_string.splitlines() if file.exists else []
        if set(written) >= in_topic:
            break
        time.sleep(2)
    distinct = set(written)
    print(f"\n[mirror] file sink: {len(written)} lines, {len(distinct)} distinct, {len(in_topic)} committed")
    assert distinct == in_topic, f"missing {len(in_topic - distinct)}, foreign {len(distinct - in_topic)}"
    aborted = [line for line in written if int(line.rsplit("-", 2)[1]) % 3 == 2]
    assert not aborted, f"records of aborted transactions in the file: {aborted[:5]}"


def _run(side: str, name: str, extra: dict[str, Any]) -> str:
    """A playbook of the kit on the site's or the core's own inventory and controller state; its
    output, once it passed."""
    state = SITE_STATE if side == "site" else CORE_STATE
    run = playbook(REPO / "playbooks" / name, extra, inventory=SCENARIO / side / "hosts.yml", state_dir=state)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return run.stdout


# Last: it takes the mirror away. Two playbook runs on the site, one on the core.
@pytest.mark.timeout(1500)
def test_a_site_that_stops_mirroring_leaves_nothing_behind_and_the_core_takes_it_off() -> None:
    """Day 2, a site removed (roles/connect/README.md): the site empties connect_mirror and runs
    connect.yml; the core takes it off kafka_mirror_sites and runs kafka.yml. The site's mirror, its
    probe, its last figures and its identity for the core go; the core refuses that identity even on
    the site's own prefix, with kafka_acls_remove_extra left false."""
    identity = worker().file("/etc/kafka-connect/tls/core.pem").content
    _run("site", "connect.yml", {"connect_mirror": {}})
    names = set(connectors().states())
    assert names == {"aggregates-file"}, f"the mirror's connectors went, the file sink stayed: {names}"
    node = worker()
    for path in (LAG_METRICS, "/etc/kafka-connect/tls/core.pem", "/etc/kafka-connect/tls/core.key"):
        assert not node.file(path).exists, path
    assert not node.file("/etc/systemd/system/pikit-mirror-lag.timer").exists
    assert changed(_run("site", "connect.yml", {"connect_mirror": {}})) == 0, "a second run changes nothing"

    _run("core", "kafka.yml", {"kafka_mirror_sites": []})
    with tempfile.TemporaryDirectory() as work:
        bundle = Path(work) / "site.pem"
        bundle.write_bytes(identity)
        bundle.chmod(0o600)
        producer = KafkaProducer(**{**core(), "ssl_certfile": str(bundle)}, max_block_ms=15_000, retries=0)
        try:
            with pytest.raises(KafkaError):
                producer.send(COPY, b"x").get(timeout=15)
        finally:
            producer.close(timeout=5)
