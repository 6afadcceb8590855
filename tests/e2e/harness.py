"""What the end-to-end suite shares: the lab site (a copy of inventory/lab, converged by
playbooks/site.yml), its nodes, the judge that recomputes every window and alert from the raw topic,
and the waits and reads the scenarios use. The scenarios are in the test_*.py files beside it, run
in one order on one lab (conftest.py)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from pikit_contract import signing
from pikit_contract.names import spark_batches_topic
from pikit_contract.readings import Reading
from pikit_dev import lab_image
from pikit_testkit import polling
from pikit_testkit.alerts_model import AlertRules, Batch, Replayed, compare_alerts, kind_of, replay
from pikit_testkit.nemesis import (
    Nemesis,
    PiLifecycle,
    SiteNodes,
    sample,
)
from pikit_testkit.pipeline_model import (
    Outcome,
    Timing,
    authentic,
    compare,
    outcome,
    split_records,
)

from pikit import REPO, role_default
from pikit.topic import mtls_client, read_to_end
from tests.conftest import without_sudo

LAB = "pikit-e2e"
SUBNET_FROM, SUBNET_TO = "10.89.77.", "10.89.83."
# The OS release of the lab's nodes; `make test-ops` runs the suite again on the one before.
SUITE = os.environ.get("PIKIT_E2E_SUITE", lab_image.DEFAULT_SUITE)
BROKERS = ["e2e-pi-1", "e2e-pi-2", "e2e-pi-3"]
BROKER_HOSTS = (11, 12, 13)  # the brokers' last address octet on SUBNET_TO, in BROKERS' order
MASTER = "e2e-pi-4"
# The apps' driver Pis (inventory/lab: spark_driver), first-ranked first: the first runs both apps'
# drivers until it dies, the other stands by (spark_apps/pikit_spark/leadership.py).
DRIVERS = ["e2e-pi-3", "e2e-pi-2"]
EDGES = ["e2e-edge-1", "e2e-edge-2"]
# Devices that sign without being hosts: the suite's own producers (pikit_device_signing_extra).
SYNTHETIC = ["e2e-late"]
APP = "sensor_aggregates"
APPS = (APP, "anomaly_alerts")  # the streaming apps, each with its driver Pis
APP_UNIT = "spark-app-sensor-aggregates"
# anomaly_alerts' batch log: what the alerts model replays.
ALERTS_BATCHES = spark_batches_topic("anomaly_alerts")
_LAB_VARS = yaml.safe_load((REPO / "inventory/lab/group_vars/all.yml").read_text())
# sensor_aggregates' rules as the lab runs them, for the model that recomputes its windows.
_SLACK = "spark_device_slack_seconds"
TIMING = Timing(slack_s=int(_LAB_VARS.get(_SLACK, role_default("spark", _SLACK))))
# anomaly_alerts holds a device silent after this much of its batches' time without its readings.
SILENT_AFTER_S = int(_LAB_VARS["spark_silent_after_seconds"])
# anomaly_alerts' rules on the lab (its other options keep the app's defaults).
ALERT_RULES = AlertRules.from_strings(_LAB_VARS["spark_anomaly_thresholds"], silent_after_s=SILENT_AFTER_S)
# From a fault's end until every query commits again and every agent has drained (issue 31).
RECOVERY_S = 60
# Past this, a query or an agent that does not flow again is stalled: the nemesis stops waiting
# and fails. Each recovery is held to its kind's bound as well (nemesis.RECOVERY_BOUNDS).
STALL_S = 300


class Site:
    def __init__(self, root: Path) -> None:
        self.inventory = root / "inventory"
        self.state = root / "state"
        self.logs = root
        self.first_recap: dict[str, int] = {}
        self.rollup_started = 0  # when test_the_daily_rollup_starts_from_its_timer_unit started it
        # (device, fence, end offsets when it was restored) of each revocation (r): the apps
        # dead-letter a record signed by the device between the two as `revoked`.
        self.revocations: list[tuple[str, dict[int, int], dict[int, int]]] = []

    def revoked(self, record: Any) -> bool:
        signer, _ = signing.signer_of(record.headers)
        return any(
            signer == device
            and fence.get(record.partition, 0) <= record.offset < until.get(record.partition, 0)
            for device, fence, until in self.revocations
        )

    def playbook(
        self, name: str, log: str, *extra: str, refused: bool = False, inventory: Path | None = None
    ) -> str:
        """The run's output; it must succeed, or with `refused`, fail."""
        # The controller has no sudo here: every playbook runs its controller tasks as the operator.
        no_sudo, sudo_calls = without_sudo(self.logs / "no-sudo")
        env = {
            **os.environ,
            **no_sudo,
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "PIKIT_STATE_DIR": str(self.state),
            "ANSIBLE_NOCOLOR": "1",
        }
        started = time.monotonic()
        proc = subprocess.run(
            ["ansible-playbook", "-i", inventory or self.inventory, REPO / "playbooks" / name, *extra],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            cwd=REPO,
        )
        out = proc.stdout + proc.stderr
        (self.logs / log).write_text(out)
        print(f"{name} ({log}): exit {proc.returncode} in {time.monotonic() - started:.0f}s")
        assert not sudo_calls.exists(), f"{name} ran sudo on the controller: {sudo_calls.read_text()}"
        if refused:
            assert proc.returncode != 0, f"{name} was expected to refuse; log tail:\n{out[-4000:]}"
        else:
            assert proc.returncode == 0, f"{name} failed; log tail:\n{out[-4000:]}"
        return out

    def client(self) -> dict[str, Any]:
        return mtls_client([f"{SUBNET_TO}{n}:9092" for n in BROKER_HOSTS], self.state / "pki")

    def values(self, topic: str) -> list[bytes]:
        return [r.value for r in read_to_end(topic, **self.client())]

    def readings(self) -> tuple[list[bytes], list[bytes]]:
        """The raw topic's values that the apps read, and those refused for their signature."""
        records = read_to_end("sensor-readings", **self.client())
        mine = ((r.value, r.headers, r.partition) for r in records if not self.revoked(r))
        kept, refused = authentic(mine, self.keys(), self.readings_partitions())
        return kept, refused + [r.value for r in records if self.revoked(r)]

    def authentic_records(self) -> list[tuple[int, int, bytes]]:
        """(partition, offset, value) of the raw topic's records that the apps read."""
        keys, partitions = self.keys(), self.readings_partitions()
        return [
            (r.partition, r.offset, r.value)
            for r in read_to_end("sensor-readings", **self.client())
            if not self.revoked(r) and authentic([(r.value, r.headers, r.partition)], keys, partitions)[0]
        ]

    @functools.cache  # noqa: B019 - one lab per harness, and the topic's partitions never change
    def readings_partitions(self) -> int:
        """The readings topic's count of partitions, by which the apps judge where a record belongs."""
        consumer = KafkaConsumer(**self.client())
        try:
            return len(consumer.partitions_for_topic("sensor-readings") or ())
        finally:
            consumer.close()

    def keys(self) -> dict[str, bytes]:
        """Every signing key the apps hold, derived here from the site secret on the controller."""
        secret = signing.read_site_secret(str(self.state / "device-signing-secret"))
        return {device: signing.device_key(secret, device) for device in EDGES + SYNTHETIC}

    def produce(
        self, records: list[tuple[str, bytes]], signed_as: str | None = "", partition: int | None = None
    ) -> None:
        """Each record signed as the device it is keyed by, or as `signed_as` (None: unsigned), in
        the partition its key gives (Kafka's default partitioner) or in `partition`."""
        keys = self.keys()
        producer = KafkaProducer(**self.client(), acks="all")
        sends = []
        for key, value in records:
            signer = key if signed_as == "" else signed_as
            headers = signing.headers(signer, keys[signer], value) if signer else None
            sends.append(
                producer.send(
                    "sensor-readings", key=key.encode(), value=value, headers=headers, partition=partition
                )
            )
        producer.flush()
        for send in sends:
            send.get(timeout=0)  # a send that failed says so here, not as a missing reading later
        producer.close()


# --- the machine's other lanes -------------------------------------------------------------


# The environment variable that names the last selected scenario marked `alone` (conftest.py
# sets it once `-m` has deselected what the run leaves out).
ALONE_UNTIL_ENV = "PIKIT_E2E_ALONE_UNTIL"


def done_alone() -> None:
    """Touch PIKIT_E2E_ALONE_DONE, which the other lane waits for (make test's molecule scenarios,
    make test-ops' second lane): the scenarios marked `alone` (the converge, the Pis lost for good,
    taken over and replaced) run with the machine to themselves. Beside the
    converge, a molecule scenario and the converge each took four times as long as alone; in CI's
    run of ab8f680, beside molecule's lane, the standby's first batch came 138 s after the loss,
    against 50-70 s alone, and the replacement's site.yml takes 359-369 s beside it, 165-234 s
    alone (docs/testing.md)."""
    if path := os.environ.get("PIKIT_E2E_ALONE_DONE"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).touch()


def done_alone_if_last(name: str | None = None) -> None:
    """done_alone if `name` (the running test's, by default) is the last `alone` scenario: from
    inside it as soon as what it measures is measured, and from conftest.py whatever happened."""
    name = name or os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[-1].split(" ")[0]
    if name and name == os.environ.get(ALONE_UNTIL_ENV):
        done_alone()


# --- the lab's nodes ---------------------------------------------------------------------


def sh(node: str, script: str, check: bool = True, timeout: float | None = None) -> str:
    proc = subprocess.run(
        ["podman", "exec", node, "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert not check or proc.returncode == 0, f"{node}: {script}: {proc.stderr}"
    return proc.stdout


def agent_metric(node: str, name: str) -> float:
    """One sample of a device's agent's metrics page, read from inside the device: the page answers
    there while the device is cut off from the network (nemesis.agent_metric reads it from here)."""
    # The lab's agents listen on their own address (inventory/lab/hosts.yml), where Prometheus scrapes.
    address = f"{SUBNET_TO}2{node.rsplit('-', 1)[1]}"
    url = f"http://{address}:9108/metrics"
    fetch = f"import urllib.request; print(urllib.request.urlopen('{url}', timeout=5).read().decode())"
    return sample(sh(node, f'python3 -c "{fetch}"', timeout=30), name)


def restarts(node: str, unit: str) -> int:
    return int(sh(node, f"systemctl show -p NRestarts --value {unit}").strip())


def master_apps() -> list[dict[str, Any]]:
    """The master's active applications, running or waiting (its page's activeapps)."""
    with urllib.request.urlopen(f"http://{SUBNET_TO}14:8080/json/", timeout=10) as response:
        return list(json.load(response).get("activeapps", []))


def app_ids(app: str = APP) -> list[str]:
    return [a["id"] for a in master_apps() if a["name"] == app]


def one_app() -> list[str] | None:
    ids = app_ids()
    return ids if len(ids) == 1 else None


def app_journal(lines: int = 80) -> str:
    """The aggregating app's last journal lines on each driver Pi, for a failure message: when its
    output is missing, the reason is in the driver's log, which dies with the lab."""
    logs = []
    for node in DRIVERS:
        log = sh(node, f"journalctl -u {APP_UNIT} -n {lines} --no-pager", check=False)
        logs.append(f"\n--- journal of {APP_UNIT} on {node} ---\n{log}")
    return "".join(logs)


def driver_of(app: str = APP) -> str:
    """The driver Pi that runs `app` now: the one whose driver committed last."""
    return SiteNodes(tuple(BROKERS), (), MASTER, tuple(EDGES), (app,), drivers=tuple(DRIVERS)).driver_of(app)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 300.0, every: float = 5.0) -> Any:
    """Errors count as "not yet": brokers and apps restart during the scenarios."""
    return polling.wait_for(what, check, timeout, every, tolerate=(Exception,))


# --- the judge ---------------------------------------------------------------------------


def judge(site: Site, scenario: str, complete: bool = False) -> Outcome:
    """Recompute every window the raw topic closes, and every alert of anomaly_alerts' committed
    batches, and compare them with the aggregates and alerts topics."""
    values, refused = site.readings()
    model = outcome(values, now=time.time(), timing=TIMING, refused=refused)

    def problems() -> list[str]:
        found = compare(model.windows, site.values("sensor-aggregates"), complete=complete)
        return found + [f"{d}: seq gap {gap}" for d in EDGES for gap in model.seq_gaps(d)]

    def alert_problems() -> list[str]:
        return compare_alerts(replayed_alerts(site), site.values("sensor-alerts"))

    with contextlib.suppress(AssertionError):  # reported below, with every difference
        wait_for(f"{scenario}: the aggregates of the model", lambda: not problems(), timeout=300)
    found = problems()
    with contextlib.suppress(AssertionError):
        wait_for(f"{scenario}: the alerts of the model", lambda: not alert_problems(), timeout=120)
    replayed = replayed_alerts(site)  # once more, for the verdict and the counts alike
    found += compare_alerts(replayed, site.values("sensor-alerts"))
    alerted = Counter(kind_of(alert) for alert in replayed.alerts)
    print(f"[{scenario}] alerts recomputed: {dict(alerted)}")
    taken = (
        {d: int(agent_metric(d, "edge_agent_readings_taken_total")) for d in EDGES} if not complete else {}
    )
    print(f"\n[{scenario}] {model.counts()}" + (f"; taken by the agents so far {taken}" if taken else ""))
    assert not found, f"{scenario}:\n" + "\n".join(found[:30]) + app_journal()
    for device in EDGES:
        assert model.devices[device][0] == 0, f"{device}: its first readings are missing"
    return model


def replayed_alerts(site: Site) -> Replayed:
    """Every alert of anomaly_alerts' committed batches, recomputed from the raw topic: the batches
    from the app's batch log first, then the raw topic (which holds at least their records)."""
    batches = [Batch.logged(n, value) for n, value in enumerate(site.values(ALERTS_BATCHES))]
    return replay(site.authentic_records(), batches, ALERT_RULES)


def pikit(site: Site, command: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """The controller's `pikit` command on the suite's site, as a user runs it."""
    return subprocess.run(
        [REPO / ".venv/bin/pikit", command, "-i", site.inventory, *argv],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PIKIT_STATE_DIR": str(site.state)},
    )


def pikit_status(site: Site, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = pikit(site, "status", "--json", "--silent-after", "20", *extra)
    assert proc.returncode in (0, 1), f"pikit status failed: {proc.stderr[-2000:]}"
    return proc.returncode, json.loads(proc.stdout)


def unhealthy(status: dict[str, Any]) -> dict[str, list[str]]:
    """{part name: its problems} of every unhealthy part."""
    parts = [status["quorum"], *status["brokers"], *status["spark"], *status["agents"]]
    return {part["name"]: part["problems"] for part in parts if part["problems"]}


# What the lab's Prometheus (roles/monitoring on the master) must fire for a stopped broker and agent.
OUTAGE_ALERTS = (
    "KafkaBrokerDown",
    "KafkaUnderReplicatedPartitions",
    "DeviceSilent",
    "NoReadings",
    "KafkaQuorumWithoutLeader",
)


def firing() -> set[tuple[str, str]]:
    """(alert, the host or device it names) of every alert the lab's Prometheus fires."""
    with urllib.request.urlopen(f"http://{SUBNET_TO}14:9090/api/v1/alerts", timeout=10) as response:
        alerts = json.load(response)["data"]["alerts"]
    return {
        (a["labels"]["alertname"], a["labels"].get("host") or a["labels"].get("device", ""))
        for a in alerts
        if a["state"] == "firing"
    }


def promql(expr: str) -> float:
    """The one value of an instant query to the lab's Prometheus."""
    query = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"http://{SUBNET_TO}14:9090/api/v1/query?{query}", timeout=10) as response:
        (result,) = json.load(response)["data"]["result"]
    return float(result["value"][1])


def outage_alerts() -> set[tuple[str, str]]:
    """The outage alerts firing, but for the suite's own synthetic devices: they send in (e) only,
    and stay silent after it, as a device that is gone does."""
    return {(name, who) for name, who in firing() if name in OUTAGE_ALERTS and who not in SYNTHETIC}


def status_healthy(site: Site) -> dict[str, Any] | None:
    """pikit status's report when it says healthy and every app has made micro-batches."""
    code, status = pikit_status(site)
    apps = [p for p in status["spark"] if p["name"].startswith("app ")]
    progressing = all(p["details"].get("queries") for p in apps)
    return status if code == 0 and not unhealthy(status) and progressing else None


def read_ends(site: Site, *, beginning: bool = False) -> dict[int, int]:
    """The readings topic's end offset in each partition, or with `beginning`, its first."""
    consumer = KafkaConsumer(**site.client())
    try:
        parts = [
            TopicPartition("sensor-readings", p) for p in consumer.partitions_for_topic("sensor-readings")
        ]
        found = consumer.beginning_offsets(parts) if beginning else consumer.end_offsets(parts)
        return {tp.partition: offset for tp, offset in found.items()}
    finally:
        consumer.close()


@functools.cache  # one inventory read per lab, not one per poll of a wait
def nemesis(site: Site, pis: PiLifecycle | None = None) -> Nemesis:
    site_nodes = SiteNodes.from_inventory(site.inventory, (APP, "anomaly_alerts"))
    return Nemesis(site_nodes, bound=STALL_S, journals=site.logs, slow=RECOVERY_S, pis=pis)


APP_PORTS = {"sensor_aggregates": 9431, "anomaly_alerts": 9432}  # their metrics_port


def contract_version(value: bytes) -> int | None:
    with contextlib.suppress(ValueError):
        doc = json.loads(value)
        return doc.get("schema") if isinstance(doc, dict) else None
    return None


def recap(out: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", out, re.MULTILINE)}


def raw_readings(site: Site) -> list[Reading]:
    return split_records(site.readings()[0])[0]


def after(site: Site, moment: float, devices: list[str] = EDGES) -> bool:
    """Every device has readings taken after `moment` in the raw topic."""
    return {r.device for r in raw_readings(site) if r.ts > moment + 5} >= set(devices)


def key_of(value: bytes) -> tuple[str, str, str, int]:
    doc = json.loads(value)
    return doc["device"], doc["sensor"], doc["metric"], int(doc["window_start"])
