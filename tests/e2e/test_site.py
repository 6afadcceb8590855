"""The site as a user first meets it: site.yml converges the lab, every service serves metrics
that pass promtool, `pikit status` is healthy, the kafka role's own verifier passes, the daily
roll-up runs from its timer; and at the end, the whole output after the agents stop is exact and a
second site.yml reports changed=0."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from typing import Any

import pytest
from pikit_contract.readings import SCHEMA_VERSION
from pikit_testkit.pipeline_model import (
    compare_late,
)

from pikit import REPO, prometheus
from pikit.prometheus import scrape
from tests.e2e.harness import (
    _LAB_VARS,
    APP,
    APP_PORTS,
    BROKER_HOSTS,
    BROKERS,
    DRIVERS,
    EDGES,
    MASTER,
    SUBNET_TO,
    SYNTHETIC,
    Site,
    agent_metric,
    contract_version,
    driver_of,
    firing,
    judge,
    outage_alerts,
    pikit,
    pikit_status,
    promql,
    raw_readings,
    recap,
    sh,
    status_healthy,
    wait_for,
)

# Two site.yml runs and the scenarios: about 20 minutes on a 2-core machine.
pytestmark = [pytest.mark.lab, pytest.mark.timeout(2700)]


# --- the scenarios (their order on the one lab: conftest.py, ORDER) ---------------------


@pytest.mark.frame
@pytest.mark.alone
def test_site_converges(site: Site) -> None:
    site.first_recap = recap(site.playbook("site.yml", "site-1.log"))
    hosts = {f"e2e-{host}" for host in ("pi-1", "pi-2", "pi-3", "pi-4", "edge-1", "edge-2")}
    assert set(site.first_recap) == hosts
    wait_for("readings of both agents", lambda: {r.device for r in raw_readings(site)} >= set(EDGES), 120)


def test_every_service_serves_its_metrics(site: Site) -> None:
    """Brokers and controllers (JMX exporter), every node (node exporter), the Spark master and
    workers (Spark's own endpoints) and each streaming app (its driver's), from the controller."""
    nodes = {f"e2e-pi-{n}": f"{SUBNET_TO}1{n}" for n in (1, 2, 3, 4)}
    nodes |= {f"e2e-edge-{n}": f"{SUBNET_TO}2{n}" for n in (1, 2)}
    for node, address in nodes.items():
        assert prometheus.values(scrape(f"http://{address}:9100/metrics"), "node_filesystem_avail_bytes"), (
            node
        )
    leaders = set()
    for node in BROKERS:
        page = scrape(f"http://{nodes[node]}:9404/metrics")
        assert prometheus.value(page, "kafka_replica_manager_underreplicatedpartitions") is not None, node
        leaders.add(prometheus.value(page, "kafka_raft_current_leader"))
    assert len(leaders) == 1 and None not in leaders, f"the brokers disagree on the raft leader: {leaders}"
    master = scrape(f"http://{nodes[MASTER]}:8080/metrics/master/prometheus")
    assert any(s.name.startswith("metrics_master_aliveWorkers") and s.value == 2 for s in master), master[:5]
    for worker in ("e2e-pi-2", "e2e-pi-3"):
        assert scrape(f"http://{nodes[worker]}:8081/metrics/prometheus"), worker

    def backlog_known() -> bool:
        page = scrape(f"http://{nodes[driver_of(APP)]}:9431/metrics")
        return (
            prometheus.value(page, "pikit_query_records_behind", query=APP, topic="sensor-readings")
            is not None
        )

    wait_for("the app's backlog in its metrics", backlog_known, 120)


def test_every_endpoint_the_kit_serves_passes_promtool(site: Site) -> None:
    """`promtool check metrics` (Prometheus's own linter, on the monitoring node) finds nothing
    in the series the kit names: Kafka's exporter rules (and the exporter's jvm_*), both apps, the
    agents, and the kit's probes on each node exporter. The node exporter's and Spark's own series
    are theirs (node_memory_MemFree_bytes, Spark's camelCase): counted, not judged."""
    kafka = [f"{SUBNET_TO}1{n}:9404" for n in (1, 2, 3)]
    # Each driver Pi's page of each app: the active driver's and the standby's.
    apps = [f"{SUBNET_TO}1{node[-1]}:{port}" for node in DRIVERS for port in (9431, 9432)]
    agents = [f"{SUBNET_TO}2{n}:9108" for n in (1, 2)]
    probes = [f"{SUBNET_TO}1{n}:9100" for n in (1, 2, 3, 4)] + [f"{SUBNET_TO}2{n}:9100" for n in (1, 2)]
    wait_for("both apps' first batches", lambda: all(scrape(f"http://{a}/metrics") for a in apps), 120)
    found = {e: promtool(e) for e in kafka + apps + agents} | {e: promtool(e, only="pikit_") for e in probes}
    assert prometheus.values(
        scrape(f"http://{probes[3]}/metrics"), "pikit_certificate_expiry_timestamp_seconds"
    )
    theirs = {
        e: promtool(e).count("\n") + 1 for e in (probes[0], f"{SUBNET_TO}14:8080/metrics/master/prometheus")
    }
    print(f"[promtool] findings in series that are not the kit's (not judged): {theirs}")
    bad = {endpoint: text for endpoint, text in found.items() if text}
    assert not bad, "\n".join(f"{endpoint}:\n{text}" for endpoint, text in bad.items())


def promtool(endpoint: str, only: str = "") -> str:
    """What `promtool check metrics` finds in an endpoint's page, or in its series named `only*`
    with their HELP and TYPE lines ("" when nothing)."""
    url = f"http://{endpoint}" if "/" in endpoint else f"http://{endpoint}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        page = response.read().decode()
    if only:
        kept = [
            line
            for line in page.splitlines()
            if line.removeprefix("# HELP ").removeprefix("# TYPE ").startswith(only)
        ]
        page = "\n".join(kept) + "\n"
    proc = subprocess.run(
        ["podman", "exec", "-i", MASTER, "promtool", "check", "metrics"],
        input=page,
        capture_output=True,
        text=True,
        check=False,
    )
    return (proc.stdout + proc.stderr).strip() if proc.returncode else ""


def test_status_says_healthy_with_every_part_named(site: Site) -> None:
    """Before the faults: every part healthy in pikit status (text, JSON and HTML), and no outage
    alert. What it says under faults is checked in (a), a broker and then all down, and (b), a
    device cut off."""
    status = wait_for("pikit status to say healthy", lambda: status_healthy(site), 240)
    assert [b["details"]["up"] for b in status["brokers"]] == [True] * 3
    assert {a["name"]: a["details"]["spool"] is not None for a in status["agents"]} == dict.fromkeys(
        EDGES, True
    )
    apps = {p["name"]: p["details"] for p in status["spark"] if p["name"].startswith("app ")}
    assert set(apps) == {"app sensor_aggregates", "app anomaly_alerts"}
    assert all(d["queries"] for d in apps.values()), apps
    page = site.logs / "status.html"
    pikit_status(site, "--html", str(page))
    assert "pikit status: healthy" in page.read_text()
    wait_for("no outage alert", lambda: not outage_alerts(), 120)
    print(f"\nPrometheus fires before the faults: {sorted(firing()) or 'nothing'}")


KAFKA_VERIFIER = REPO / "roles/kafka/molecule/default/tests"


def test_the_kafka_roles_own_verifier_passes_on_this_lab(site: Site) -> None:
    """The kafka role's molecule verifier, on this lab's three combined-mode brokers as on its
    default scenario's: mTLS round trip, the refusals (no certificate, another CA, a wrong SCRAM
    password), the TLS offer of every listener the controller reaches, the declared topics, the
    metrics. Its tests that write into the pipeline's topics, or run Kafka's converge again (a node
    given another id, a node that lost its storage: a minute or more each here), and its broker
    faults run in make test-ops (kafka/default and kafka/dedicated)."""
    env = {
        **os.environ,
        "KAFKA_TEST_NODES": ",".join(
            f"{b}={SUBNET_TO}{n}:cb" for b, n in zip(BROKERS, BROKER_HOSTS, strict=True)
        ),
        "KAFKA_TEST_SASL_PORT": str(_LAB_VARS["kafka_sasl_port"]),
        # The firewall test above checks that these drop whatever is not a Kafka node.
        "KAFKA_TEST_FIREWALLED_PORTS": "9093,9094",
        "PIKIT_STATE_DIR": str(site.state),
    }
    argv = [REPO / ".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=5"]
    argv += ["-m", "not site_topics and not reconverge", KAFKA_VERIFIER]
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, cwd=REPO)
    lines = proc.stdout.strip().splitlines()
    summary = lines[-1] if lines else proc.stderr[-2000:]
    print("\n[kafka verifier] " + "\n  ".join(lines[-12:]))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    # 6 listeners' TLS offers, 5 other checks of test_cluster.py, 3 of test_metrics.py
    assert passed and int(passed[1]) >= 14, f"fewer checks ran than the lab offers: {summary}"


ROLLUP_UNIT = "spark-app-daily-rollup"


@pytest.mark.frame
def test_the_daily_rollup_starts_from_its_timer_unit(site: Site) -> None:
    """site.yml schedules daily_rollup on the master (spark_rollup_on_calendar). Its unit is started
    now and runs beside the last test (2-3 minutes on the lab: it waits for executors beside the
    streaming apps), which checks its outcome (the_daily_rollup_ran)."""
    assert sh(DRIVERS[0], f"systemctl is-enabled {ROLLUP_UNIT}.timer").strip() == "enabled"
    assert sh(DRIVERS[0], f"systemctl is-active {ROLLUP_UNIT}.timer").strip() == "active"
    wait_for("the first windows in the aggregates topic", lambda: site.values("sensor-aggregates"), 300)
    site.rollup_started = int(time.time())
    sh(DRIVERS[0], f"systemctl start --no-block {ROLLUP_UNIT}.service")


def the_daily_rollup_ran(site: Site) -> None:
    """The unit ended well, and the daily topic holds, for every date x device x sensor x metric of
    the aggregates topic, the exact pooling of that series' first `windows` windows in the topic's
    order (the run read each partition to the end it found, while the apps went on writing)."""
    assert site.rollup_started, "test_the_daily_rollup_starts_from_its_timer_unit did not run"

    def ended() -> str | None:
        state = sh(DRIVERS[0], f"systemctl show -p ActiveState --value {ROLLUP_UNIT}.service").strip()
        return None if state == "activating" else state

    wait_for("daily_rollup's run to end", ended, 600, every=5)
    assert sh(DRIVERS[0], f"systemctl show -p Result --value {ROLLUP_UNIT}.service").strip() == "success"
    log = sh(DRIVERS[0], f"journalctl -u {ROLLUP_UNIT} --since @{site.rollup_started} --no-pager")
    assert "written to sensor-daily" in log, log[-3000:]
    series: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for value in site.values("sensor-aggregates"):
        window = json.loads(value)
        date = time.strftime("%Y-%m-%d", time.gmtime(window["window_start"]))
        series.setdefault((window["device"], window["sensor"], window["metric"], date), []).append(window)
    days = {
        (d["device"], d["sensor"], d["metric"], d["date"]): d
        for d in map(json.loads, site.values("sensor-daily"))
    }
    assert days and set(days) == set(series), (sorted(days)[:5], sorted(series)[:5])
    for key, day in days.items():
        pooled = series[key][: day["windows"]]
        assert day["windows"] >= 1 and len(pooled) == day["windows"], key
        expected = (
            sum(w["count"] for w in pooled),
            min(w["min"] for w in pooled),
            max(w["max"] for w in pooled),
        )
        assert (day["count"], day["min"], day["max"]) == expected, (key, day, expected)
        mean = sum(w["mean"] * w["count"] for w in pooled) / expected[0]
        assert abs(day["mean"] - mean) <= 1e-9 * max(1.0, abs(mean)), (key, day["mean"], mean)
    # common's probe read the unit from inside its sandbox, and Prometheus has it as not failed
    # (UnitFailed's input; the probe's failed case runs in molecule edge_agent/default, tests/molecule/base).
    unit = f'pikit_unit_failed{{unit="{ROLLUP_UNIT}"}}'
    wait_for(f"{unit} == 0 in Prometheus", lambda: promql(unit) == 0, 180, every=10)
    print(f"[end] {ROLLUP_UNIT}.service: success, {len(days)} daily records exact; {unit} 0")


@pytest.mark.frame
def test_the_whole_output_after_the_agents_stop(site: Site) -> None:
    taken = {d: int(agent_metric(d, "edge_agent_readings_taken_total")) for d in EDGES}
    for node in EDGES:
        sh(node, "systemctl stop edge-agent")
        log = sh(node, "journalctl -u edge-agent -n 30 --no-pager")
        assert "stopped: 0 readings left in the spool" in log, log[-2000:]
    model = judge(site, "end: agents stopped", complete=True)
    for device in EDGES:
        assert len(model.devices[device]) >= taken[device], f"{device}: fewer readings in Kafka than it took"
    assert not compare_late(model.late, site.values("sensor-late"))
    assert sorted(site.values("sensor-dead-letter")) == sorted(model.dead)
    open_devices = {key[0] for key in model.open_windows}
    # The suite's late device sends in (e) only: a run of selected scenarios may not have it.
    senders = {*EDGES, *(device for device in SYNTHETIC if device in model.devices)}
    assert open_devices == senders, "each device's last window waits for the device"
    print(f"[end] readings taken by the agents before they stopped: {taken}")
    versions = Counter(contract_version(v) for v in site.values("sensor-readings"))
    print(f"[end] records of the readings topic by contract version: {dict(versions)}")
    assert versions[SCHEMA_VERSION] > 0, "the agents write this release's version"
    the_latest_values_are_the_newest_aggregates(site)

    for node in EDGES:
        sh(node, "systemctl start edge-agent")
    second = recap(site.playbook("site.yml", "site-2.log"))
    assert second == dict.fromkeys(site.first_recap, 0), f"second run changed something: {second}"
    the_daily_rollup_ran(site)


def the_latest_values_are_the_newest_aggregates(site: Site) -> None:
    """`pikit latest` (the compacted latest topic) answers, for every device and each of its
    series, the newest window of the aggregates topic, record for record; one device alone too."""
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for value in site.values("sensor-aggregates"):
        doc = json.loads(value)
        series = (doc["device"], doc["sensor"], doc["metric"])
        if series not in newest or doc["window_start"] > newest[series]["window_start"]:
            newest[series] = doc
    answered = pikit_latest(site)
    assert {(w["device"], w["sensor"], w["metric"]): w for w in answered} == newest
    one = pikit_latest(site, EDGES[0])
    assert one and {w["device"] for w in one} == {EDGES[0]}
    print(f"[end] pikit latest: {len(answered)} series, each the newest of the aggregates topic")
    # The lab asks for the mean as a gauge (spark_latest_gauges); the app holds the windows it
    # closed since it last started, which for the agents' devices includes their newest.
    page = scrape(f"http://{SUBNET_TO}1{driver_of(APP)[-1]}:{APP_PORTS[APP]}/metrics", timeout=10)
    gauges = {
        (x.labels["device"], x.labels["sensor"], x.labels["metric"]): x.value
        for x in page
        if x.name == "pikit_latest_mean" and x.labels["device"] in EDGES
    }
    assert gauges == {k: w["mean"] for k, w in newest.items() if k[0] in EDGES}, gauges
    print(f"[end] pikit_latest_mean: {len(gauges)} series of the agents' devices, each the newest mean")


def pikit_latest(site: Site, *device: str) -> list[dict[str, Any]]:
    proc = pikit(site, "latest", "--json", *device)
    assert proc.returncode == 0, f"pikit latest failed: {proc.stderr[-2000:]}"
    found: list[dict[str, Any]] = json.loads(proc.stdout)
    return found
