"""Security under load: every unit sandboxed, the firewall, the Spark master's UI, bad and forged
input dead-lettered, a stolen device revoked while it sends, a device flooding past its quota
(make test-ops), every certificate renewed and the CA rotated while the agents produce
(make test-ops). Each ends in an exact recompute of the output."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import re
import socket
import ssl
import statistics
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError
from pikit_contract import signing
from pikit_contract.readings import Reading, decode_batch, encode_batch
from pikit_dev import lab_image
from pikit_testkit.molecule_lab import AckedProducer, assert_every_ack_once_in_order, consume_all, producing
from pikit_testkit.pipeline_model import (
    compare_late,
    split_records,
)
from pikit_testkit.reach import reach_command

from pikit.topic import read_to_end
from tests.e2e.harness import (
    _LAB_VARS,
    APP_UNIT,
    BROKER_HOSTS,
    BROKERS,
    DRIVERS,
    EDGES,
    LAB,
    MASTER,
    SUBNET_TO,
    SUITE,
    Site,
    after,
    app_ids,
    app_journal,
    judge,
    key_of,
    one_app,
    outage_alerts,
    pikit_status,
    read_ends,
    restarts,
    sh,
    wait_for,
)

# Two site.yml runs and the scenarios: about 20 minutes on a 2-core machine.
pytestmark = [pytest.mark.lab, pytest.mark.timeout(2700)]


SECURITY_BAR = 3.0  # systemd-analyze security's exposure level, at most, of every unit the kit writes
_EXPOSURE = re.compile(r"Overall exposure level for (\S+): ([0-9.]+)")


def test_every_unit_the_kit_writes_is_sandboxed_to_the_bar(site: Site) -> None:
    """`systemd-analyze security` on every node, for every service unit the kit wrote (its
    template's `Ansible managed` header): each at most SECURITY_BAR. The suite that follows runs
    them all, so it proves that the sandbox takes nothing they need."""
    scores = {}
    for node in [*BROKERS, MASTER, *EDGES]:
        units = sh(node, "grep -l '^# Ansible managed' /etc/systemd/system/*.service").split()
        assert units, f"{node}: no unit of the kit found"
        names = " ".join(Path(unit).name for unit in units)
        report = sh(node, f"systemd-analyze security --no-pager {names}")
        found = dict(_EXPOSURE.findall(report))
        assert set(found) == {Path(unit).name for unit in units}, f"{node}: {report[-2000:]}"
        scores.update({f"{node} {unit}": float(level) for unit, level in found.items()})
    print("\n" + "\n".join(f"{level:4.1f} {unit}" for unit, level in sorted(scores.items())))
    above = {unit: level for unit, level in scores.items() if level > SECURITY_BAR}
    assert not above, f"above {SECURITY_BAR}: {above}"
    kinds = {unit.split()[1] for unit in scores}
    assert {"kafka.service", "edge-agent.service", "pikit-cert-expiry.service"} <= kinds


def test_the_firewall_drops_a_stranger_and_lets_the_cluster_through(site: Site) -> None:
    """A container on the lab's network that is in no inventory group reaches SSH and nothing of
    Kafka or Spark; the cluster's own traffic is the rest of this suite, run behind the firewall."""
    stranger = f"{LAB}-stranger"
    image = lab_image.ensure_image(SUITE)
    probes = [
        ("broker", f"{SUBNET_TO}11", 9092),
        ("quorum", f"{SUBNET_TO}11", 9093),
        ("master", f"{SUBNET_TO}14", 7077),
        ("master UI", f"{SUBNET_TO}14", 8080),
        ("ssh", f"{SUBNET_TO}11", 22),
    ]
    script = "; ".join(reach_command(address, port) for _, address, port in probes)
    seen = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "--name",
            stranger,
            "--network",
            LAB,
            "--ip",
            f"{SUBNET_TO}99",
            image,
            "sh",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    outcome = {name: result for (name, _, _), result in zip(probes, seen, strict=True)}
    device = {port: sh(EDGES[0], reach_command(f"{SUBNET_TO}11", port)).strip() for port in (9092, 9093)}
    print(f"\n[firewall] from a stranger: {outcome}; from {EDGES[0]}: {device}")
    assert outcome == {
        "broker": "dropped",
        "quorum": "dropped",
        "master": "dropped",
        "master UI": "dropped",
        "ssh": "answered",
    }
    assert device == {9092: "answered", 9093: "dropped"}
    for node in [*BROKERS, MASTER, *EDGES]:
        assert "policy drop" in sh(node, "nft list chain inet pikit input"), f"{node}: no firewall"


def test_the_spark_master_refuses_an_unauthenticated_kill(site: Site) -> None:
    (app,) = wait_for("the app to run", one_app, 240)
    request = urllib.request.Request(
        f"http://{SUBNET_TO}14:8080/app/kill/?id={app}&terminate=true", data=b"", method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status = response.status
    except urllib.error.HTTPError as refused:
        status = refused.code
    time.sleep(20)  # longer than the unit's RestartSec: a killed app would be back under a new id
    print(f"\n[ui] POST /app/kill/ for {app}: HTTP {status}; apps now {app_ids()}")
    assert status >= 400, f"the master accepted the kill request (HTTP {status})"
    assert app_ids() == [app], "the app was killed through the UI"
    with contextlib.suppress(OSError), socket.create_connection((f"{SUBNET_TO}14", 6066), timeout=3):
        raise AssertionError("the master's REST submission server (6066) is listening")


def test_bad_input_is_dead_lettered_and_a_late_device_keeps_every_window(site: Site) -> None:
    sent = site.values("sensor-readings")
    ts = decode_batch(sent[-1])[-1].ts  # seconds, whichever version the agent wrote
    shape = {"sensor": "simulated", "metric": "temperature", "unit": "C"}
    bad = [
        b"\x00\x01 binary noise",
        b'{"schema": 1, "device": "e2e-edge-1"}',
        json.dumps(
            {
                "schema": 1,
                "device": "e2e-edge-2",
                "readings": [{**shape, "seq": 10**9, "value": "n/a", "ts": ts}],
            }
        ).encode(),
        # A device clock a day ahead: a dead letter that moves no window.
        json.dumps(
            {
                "schema": 1,
                "device": "e2e-edge-2",
                "readings": [{**shape, "seq": 10**9, "value": 1.0, "ts": ts + 86400}],
            }
        ).encode(),
    ]
    # Records resent after an agent crash, the bad ones, and a device whose readings of
    # its first minute come again after its second minute closed that window.
    minute = (int(time.time()) // 60 - 5) * 60
    late_device = [
        Reading("e2e-late", i, "simulated", "temperature", 20.0 + i, "C", minute + 2 * i) for i in range(30)
    ]
    late_device.append(Reading("e2e-late", 30, "simulated", "temperature", 25.0, "C", minute + 75))
    site.produce([(json.loads(v)["device"], v) for v in sent[3:6]] + [("e2e-edge-2", v) for v in bad])
    # The late device runs the release before the contract's version 2 (0.1.0): its records are
    # version 1 (ts in seconds) beside the agents' version 2, and the judge holds the apps to both.
    site.produce([("e2e-late", encode_batch("e2e-late", late_device, schema=1))])
    # With e2e-edge-1's key as found on the device, a record that claims e2e-edge-2 (its seq far
    # ahead: taken, it would make every later reading of e2e-edge-2 a duplicate); one that claims
    # e2e-edge-1 itself, in a partition that is not its own (taken, it would give e2e-edge-1 a
    # second state there, and its windows a second copy); and a record with no signature at all.
    stolen = bytes.fromhex(sh(EDGES[0], "cat /etc/edge-agent/tls/signing.key").strip())
    assert stolen == site.keys()[EDGES[0]], "the device holds its own key, derived from the site secret"
    forged = encode_batch(EDGES[1], [Reading(EDGES[1], 10**12, "simulated", "temperature", -40.0, "C", ts)])
    unsigned = encode_batch(EDGES[1], [Reading(EDGES[1], 10**12, "simulated", "humidity", 0.0, "%", ts)])
    site.produce([(EDGES[1], forged)], signed_as=EDGES[0])
    site.produce([(EDGES[1], unsigned)], signed_as=None)
    partitions = site.readings_partitions()
    elsewhere = (signing.home_partition(EDGES[0], partitions) + 1) % partitions
    misplaced = encode_batch(EDGES[0], [Reading(EDGES[0], 10**12, "simulated", "temperature", 90.0, "C", ts)])
    site.produce([(EDGES[0], misplaced)], partition=elsewhere)
    window = ("e2e-late", "simulated", "temperature", minute)
    try:
        wait_for(
            "the late device's first window",
            lambda: window in {key_of(v) for v in site.values("sensor-aggregates")},
        )
    except AssertionError as missing:
        raise AssertionError(f"{missing}{app_journal()}") from None
    late = [
        Reading("e2e-late", 31 + i, "simulated", "temperature", 99.0, "C", minute + 10 + i) for i in range(5)
    ]
    site.produce([("e2e-late", encode_batch("e2e-late", late, schema=1))])

    model = judge(site, "e: bad input and a late device")
    _, dead = split_records(bad, now=time.time())
    assert len(dead) == 4
    assert forged in model.dead and unsigned in model.dead and misplaced in model.dead
    wait_for("the dead letters", lambda: len(site.values("sensor-dead-letter")) >= len(model.dead), 120)
    assert sorted(site.values("sensor-dead-letter")) == sorted(model.dead)
    reasons = {
        r.value: dict(r.headers)["reason"].decode()
        for r in read_to_end("sensor-dead-letter", **site.client())
    }
    print(
        f"[e] forged: {reasons[forged]!r}; unsigned: {reasons[unsigned]!r}; misplaced: {reasons[misplaced]!r}"
    )
    assert reasons[forged] == f"{signing.FORGED} (signer: {EDGES[0]})", "the forging principal is named"
    assert reasons[misplaced] == f"{signing.MISPLACED} (signer: {EDGES[0]})"
    assert reasons[unsigned] == signing.UNSIGNED
    wait_for("the late readings", lambda: not compare_late(model.late, site.values("sensor-late")), 120)
    assert sorted(r.seq for r in model.late) == [31, 32, 33, 34, 35]
    assert model.duplicates >= 3


REFUSED_WITHIN_S = 60  # issue 34: a revoked device is refused by every broker within a minute


def test_a_stolen_device_revoked_while_it_sends_is_refused_then_restored(site: Site) -> None:
    """(r) One device revoked while its agent keeps sending: every broker refuses it within a
    minute, no broker or app restarts, the other device goes on without a gap; a record signed
    with its stolen key and written through another certificate is a dead letter `revoked`;
    pikit status and certs.yml say so. Restored, its agent's spool drains and is counted."""
    device, other = EDGES
    units = {node: restarts(node, "kafka") for node in BROKERS} | {
        (d, APP_UNIT): restarts(d, APP_UNIT) for d in DRIVERS
    }
    started = time.time()
    site.playbook("edge-revoke.yml", "revoke.log", "-e", f"device={device}")
    took = time.time() - started
    record = json.loads((site.state / "revoked-devices.json").read_text())[device]
    fence = {int(p): int(o) for p, o in record["fence"].items()}
    try:
        # The agent keeps trying: its sends are refused for their authorization, and it keeps them.
        wait_for(
            f"{device}'s agent refused by the brokers",
            lambda: (
                "TopicAuthorizationFailed"
                in sh(device, f"journalctl -u edge-agent --since @{int(started)} --no-pager")
            ),
            120,
        )
        records = read_to_end("sensor-readings", **site.client())
        mine = [r for r in records if r.key == device.encode()]
        past_fence = [r for r in mine if r.offset >= fence.get(r.partition, 0)]
        assert not past_fence, "the device wrote past its fence"
        last = max(r.timestamp for r in mine) / 1000
        print(f"[r] edge-revoke.yml took {took:.0f} s; {device}'s last record {last - started:.0f} s after")
        assert last - started <= REFUSED_WITHIN_S

        # Its key, stolen with it, signs a record that another certificate (the suite's) writes.
        ts = time.time()
        forged = encode_batch(device, [Reading(device, 10**12, "simulated", "temperature", 21.0, "C", ts)])
        site.produce([(device, forged)], signed_as=device)
        revoked = f"{signing.REVOKED} (signer: {device})"

        def dead_letter_reason() -> str | None:
            found = [r for r in read_to_end("sensor-dead-letter", **site.client()) if r.value == forged]
            return dict(found[0].headers)["reason"].decode() if found else None

        assert wait_for("the forged record's dead letter", dead_letter_reason, 120) == revoked
        _, status = pikit_status(site)
        shown = {a["name"]: a["details"] for a in status["agents"]}
        assert shown[device].get("revoked") == record["revoked_at"], shown
        certs = site.playbook("certs.yml", "certs-revoked.log")
        assert f"revoked {record['revoked_at']}" in certs
    finally:
        # Let back in whatever happened above: the scenarios after this one need the device.
        site.revocations.append((device, fence, read_ends(site)))
        restoring = time.time()
        site.playbook("edge-revoke.yml", "restore.log", "-e", f"device={device}", "-e", "revoked=false")
    wait_for(f"{device}'s readings after its restore", lambda: after(site, restoring, [device]), 180)
    print(f"[r] {device} writes again {time.time() - restoring:.0f} s after the restore started")
    # Seen from the other device: readings all along, with no gap longer than a few of its rounds.
    theirs = sorted(
        r.timestamp / 1000
        for r in read_to_end("sensor-readings", **site.client())
        if r.key == other.encode() and r.timestamp / 1000 >= started
    )
    gaps = [b - a for a, b in itertools.pairwise(theirs)]
    print(f"[r] {other}: {len(theirs)} records from revocation to restore, longest gap {max(gaps):.1f} s")
    assert max(gaps) < 15
    assert units == {node: restarts(node, "kafka") for node in BROKERS} | {
        (d, APP_UNIT): restarts(d, APP_UNIT) for d in DRIVERS
    }
    judge(site, "r: a device revoked, then restored")
    assert forged in site.readings()[1]
    wait_for("no outage alert", lambda: not outage_alerts(), 180)


FLOOD_TIMES = 20  # issue 34: a device offering 20 times its quota
FLOOD_PHASE_S = 300  # five windows with the flood, five without
_FLOOD = """
import json, os, sys, time
from kafka import KafkaProducer
servers, rate, seconds = sys.argv[1].split(","), int(sys.argv[2]), float(sys.argv[3])
tls = "/etc/edge-agent/tls"
producer = KafkaProducer(bootstrap_servers=servers, security_protocol="SSL", ssl_cafile=tls + "/ca.crt",
                         ssl_certfile=tls + "/edge-agent.pem", acks="all", linger_ms=20)
record = b"flood " + os.urandom(994)  # not JSON: a dead letter, for its contract reason
acked, offered, started = [0], 0, time.monotonic()
def done(_):
    acked[0] += len(record)
while time.monotonic() - started < seconds:
    while offered < rate * (time.monotonic() - started):
        producer.send("sensor-readings", key=sys.argv[4].encode(), value=record).add_callback(done)
        offered += len(record)
    time.sleep(0.01)
throttle = max(group.get("throttle-time-max", 0.0) for group in producer.metrics().values())
print(json.dumps({"offered": offered, "acked": acked[0], "seconds": time.monotonic() - started,
                  "throttle_max_ms": throttle}), flush=True)
os._exit(0)  # what waits in the buffer is dropped: a flood needs no goodbye
"""


@pytest.mark.ops
def test_a_device_flooding_at_20_times_its_quota_is_held_to_it(site: Site) -> None:
    """(q, make test-ops) e2e-edge-1's certificate floods the readings topic at 20 times its
    producer quota for five minutes, beside its own agent. The brokers hold it to its quota, pikit
    status names it throttled; e2e-edge-2's windows reach the aggregates within 10 % of the
    latency they had in the five minutes before."""
    flooder, other = EDGES
    quota = int(_LAB_VARS.get("kafka_device_quota_bytes_per_second", 16384))
    before_start = time.time()
    time.sleep(FLOOD_PHASE_S)
    flood_start = time.time()
    # The agent's own venv (its ExecStart runs the venv's edge-agent script): kafka-python is there.
    agent = re.search(r"path=(\S+)", sh(flooder, "systemctl show -p ExecStart --value edge-agent"))
    assert agent, "the agent's ExecStart"
    python = f"{agent[1].rsplit('/', 1)[0]}/python"
    brokers = ",".join(f"{SUBNET_TO}{n}:9092" for n in BROKER_HOSTS)
    script = site.logs / "flood.py"
    script.write_text(_FLOOD)
    subprocess.run(["podman", "cp", str(script), f"{flooder}:/tmp/flood.py"], check=True)
    named: dict[str, list[str]] = {}

    def status_names_it() -> bool:
        if flood.done():
            flood.result()  # a flooder that failed says why here, not as a status that never comes
        _, status = pikit_status(site)
        problems = {a["name"]: a["problems"] for a in status["agents"]}
        named.update(problems)
        return any(p.startswith("throttled") for p in problems.get(flooder, []))

    with ThreadPoolExecutor(1) as pool:
        flood = pool.submit(
            sh,
            flooder,
            f"{python} /tmp/flood.py {brokers} {FLOOD_TIMES * quota} {FLOOD_PHASE_S} {flooder}",
        )
        wait_for("pikit status to name the flooding device throttled", status_names_it, 240, every=10)
        report = json.loads(flood.result(timeout=FLOOD_PHASE_S + 120).strip().splitlines()[-1])
    flood_end = time.time()
    held = report["acked"] / report["seconds"]
    print(
        f"[q] offered {report['offered'] / report['seconds']:.0f} B/s ({FLOOD_TIMES}x the quota of {quota}), "
        f"acknowledged {held:.0f} B/s ({held / quota:.2f}x the quota); longest throttle "
        f"{report['throttle_max_ms']:.0f} ms; pikit status: {named.get(flooder)}"
    )
    assert held <= 1.5 * quota, "held to about its quota (Kafka lets a first burst through)"
    last_end = int(flood_end) // 60 * 60

    def last_window_out() -> bool:
        return bool(window_latencies(site, other, last_end, last_end))

    wait_for("the other device's last window of the flood", last_window_out, 300)
    calm = window_latencies(site, other, before_start + 60, flood_start)
    flooded = window_latencies(site, other, flood_start + 60, flood_end)
    assert calm and flooded, f"windows of {other}: {len(calm)} before the flood, {len(flooded)} during it"
    calm_p50, flooded_p50 = statistics.median(calm), statistics.median(flooded)
    print(
        f"[q] {other}: window end -> aggregate in Kafka, median {calm_p50:.1f} s before the flood "
        f"({len(calm)} aggregates), {flooded_p50:.1f} s during it ({len(flooded)}): "
        f"{flooded_p50 / calm_p50:.2f}x"
    )
    assert flooded_p50 <= 1.1 * calm_p50
    judge(site, "q: a device flooding at 20 times its quota")


def window_latencies(site: Site, device: str, since: float, until: float) -> list[float]:
    """Seconds from the end of each of the device's windows ending in [since, until] to its
    aggregate's record in Kafka."""
    window_s = 60  # sensor_aggregates' window on the lab
    found = []
    for record in read_to_end("sensor-aggregates", **site.client()):
        doc = json.loads(record.value)
        end = int(doc["window_start"]) + window_s
        if doc["device"] == device and since <= end <= until:
            found.append(record.timestamp / 1000 - end)
    return found


@pytest.mark.ops
def test_every_certificate_renewed_while_the_agents_produce(site: Site) -> None:
    pki = site.state / "pki"
    issued = sorted([*pki.glob("issued/*.crt"), *pki.glob("clients/*.crt")])
    before = {p.name: p.read_bytes() for p in [*issued, pki / "ca.crt"]}
    started = int(time.time())
    # A renewal window longer than any lifetime: site.yml issues every node, device and client
    # certificate again, and restarts each service behind its health gate.
    site.playbook("site.yml", "site-renew.log", "-e", "pki_renew_before_days=100000")
    renewed = sorted(p.name for p in issued if p.read_bytes() != before[p.name])
    print(f"\n[f] {len(renewed)} of {len(issued)} certificates renewed in {time.time() - started:.0f}s")
    assert renewed == sorted(p.name for p in issued), "every node, device and client certificate renewed"
    assert (pki / "ca.crt").read_bytes() == before["ca.crt"], "the CA stays"
    report = site.playbook("certs.yml", "certs.log")  # which fails on an expired certificate
    rows = [line for line in report.splitlines() if re.match(r"\s+- (client|device|node|ca) ", line)]
    assert len(rows) == len(issued) + 1 and all(re.search(r" \d+ +ok ", row) for row in rows), rows
    back = time.time()
    wait_for("both devices' readings after the renewal", lambda: after(site, back), 240)
    assert not tls_refusals(started)
    judge(site, "f: every certificate renewed while the agents produce")


@pytest.mark.ops
def test_the_ca_rotated_while_the_agents_produce(site: Site, tmp_path: Path) -> None:
    """stage, promote, retire (playbooks/ca-rotate.yml, each with site.yml's health-gated
    restarts) while both agents produce, and beside them a client that keeps the files it loaded
    before each step (the trust bundle, its certificate), as a client outside the kit does: no TLS
    client refused at any step, no handshake failed on any broker, nothing that client had
    acknowledged lost; then every broker serves the new CA's certificate and trusts it alone, a
    certificate of the retired CA is refused, and every window is exact."""
    pki = site.state / "pki"
    old_ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes()).subject
    retired_identity = tmp_path / "admin-by-the-old-ca.pem"
    retired_identity.write_bytes((pki / "clients/admin.pem").read_bytes())
    topic = "e2e-ca-rotation"
    admin = KafkaAdminClient(**site.client())
    try:
        admin.create_topics([NewTopic(topic, 3, 3)])
    finally:
        admin.close()
    started = int(time.time())
    acked: list[tuple[bytes, bytes]] = []
    sent = 0
    for step in ("stage", "promote", "retire"):
        begun = time.time()
        sender = AckedProducer(files_of_the_moment(site, tmp_path / step), first=sent)
        with producing(sender, topic):
            site.playbook("ca-rotate.yml", f"ca-rotate-{step}.log", "-e", f"pki_rotate_step={step}")
        trusted = (pki / "trust.crt").read_bytes().count(b"BEGIN CERTIFICATE")
        print(
            f"\n[g] {step}: {time.time() - begun:.0f}s, {trusted} CA(s) trusted; a client of the files "
            f"before it sent {sender.sent - sent}, {len(sender.acked)} acknowledged, {sender.failed} failed"
        )
        assert trusted == (1 if step == "retire" else 2)
        assert sender.failed == 0, f"{step}: a client of the files before it was refused"
        acked += sender.acked
        sent = sender.sent
        back = time.time()
        wait_for(f"both devices' readings after {step}", functools.partial(after, site, back), 240)
    new_ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes()).subject
    assert new_ca != old_ca
    issued = [*pki.glob("issued/*.crt"), *pki.glob("clients/*.crt")]
    by_old = [p.name for p in issued if x509.load_pem_x509_certificate(p.read_bytes()).issuer != new_ca]
    assert not by_old, f"still signed by the old CA: {by_old}"
    trust = (pki / "trust.crt").read_bytes()
    for node in [*EDGES, *BROKERS]:
        held = "/etc/edge-agent/tls/ca.crt" if node in EDGES else "/etc/kafka/tls/ca.crt"
        assert sh(node, f"cat {held}").encode() == trust, f"{node} trusts the new CA alone"
    assert not tls_refusals(started)
    assert not tls_refusals(started, [(broker, "kafka") for broker in BROKERS])  # "SSL handshake failed"
    assert served_issuers(pki) == {broker: new_ca for broker in BROKERS}, "every broker restarted on it"
    for host in BROKER_HOSTS:  # each broker refuses a client holding the retired CA's certificate
        with pytest.raises(KafkaError):
            KafkaAdminClient(
                **{
                    **site.client(),
                    "bootstrap_servers": [f"{SUBNET_TO}{host}:9092"],
                    "ssl_certfile": str(retired_identity),
                },
                request_timeout_ms=10000,
                bootstrap_timeout_ms=10000,
            ).close()
    assert_every_ack_once_in_order(acked, consume_all(topic, site.client()))
    judge(site, "g: the CA rotated while the agents produce")


def files_of_the_moment(site: Site, into: Path) -> dict[str, Any]:
    """The admin client's options with copies of its trust bundle and certificate as they are now:
    a client that loaded them and never reads them again."""
    into.mkdir()
    options = site.client()
    for option in ("ssl_cafile", "ssl_certfile"):
        copy = into / Path(options[option]).name
        copy.write_bytes(Path(options[option]).read_bytes())
        options[option] = str(copy)
    return options


def served_issuers(pki: Path) -> dict[str, x509.Name]:
    """The issuer of the certificate each broker's client listener serves."""
    context = ssl.create_default_context(cafile=str(pki / "trust.crt"))
    context.check_hostname = False  # the issuer is what is asked here, not the name
    context.load_cert_chain(str(pki / "clients/admin.pem"))
    found = {}
    for broker, host in zip(BROKERS, BROKER_HOSTS, strict=True):
        with (
            socket.create_connection((f"{SUBNET_TO}{host}", 9092), timeout=10) as raw,
            context.wrap_socket(raw) as tls,
        ):
            served = tls.getpeercert(binary_form=True)
            assert served is not None
            found[broker] = x509.load_der_x509_certificate(served).issuer
    return found


_REFUSED = re.compile(
    r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|bad certificate|handshake fail", re.IGNORECASE
)


def tls_refusals(since: int, units: list[tuple[str, str]] | None = None) -> list[str]:
    """TLS refusals logged since `since` (Unix seconds) by these (node, unit)s: by default the
    agents and the aggregating app."""
    found = []
    default = [(d, "edge-agent") for d in EDGES] + [(d, "spark-app-sensor-aggregates") for d in DRIVERS]
    for node, unit in units or default:
        log = sh(node, f"journalctl -u {unit} --since @{since} --no-pager", check=False)
        found += [f"{node} {unit}: {line}" for line in log.splitlines() if _REFUSED.search(line)]
    print(f"[tls] {len(found)} refusals logged since {since}")
    return found
