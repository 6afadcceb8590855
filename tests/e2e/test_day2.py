"""Day 2 under load (make test-ops): a Spark worker decommissioned, the fleet re-flashed one Pi at a
time, a new reading contract rolled out apps first, records deleted before a time. Each ends in an
exact recompute of the output."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.pikit.cluster.plugins.modules import kafka_admin
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from pikit_contract.names import spark_batches_topic
from pikit_dev import lab
from pikit_testkit.alerts_model import Batch
from pikit_testkit.pipeline_model import (
    Outcome,
    compare,
    outcome,
)

from pikit import REPO, artifacts
from pikit.topic import read_to_end
from tests.conftest import load_filter_plugin
from tests.e2e.harness import (
    APP,
    APP_PORTS,
    APP_UNIT,
    BROKERS,
    DRIVERS,
    EDGES,
    MASTER,
    SUBNET_TO,
    SUITE,
    TIMING,
    Site,
    after,
    app_journal,
    contract_version,
    driver_of,
    judge,
    key_of,
    nemesis,
    read_ends,
    recap,
    restarts,
    sh,
    wait_for,
)

# Two site.yml runs and the scenarios: about 20 minutes on a 2-core machine.
pytestmark = [pytest.mark.lab, pytest.mark.timeout(2700)]


def master_view() -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{SUBNET_TO}14:8080/json/", timeout=10) as response:
        return dict(json.load(response))


@pytest.mark.ops
def test_a_worker_decommissioned_while_the_apps_run_keeps_them_exact(site: Site) -> None:
    """spark_workers_decommissioned takes a worker out of service: its executors leave, the apps
    keep running (same application ids, so their drivers and state stayed) on the other worker, and
    every window stays exact. Taking it out of the list brings the worker back."""
    worker, address = "e2e-pi-3", f"{SUBNET_TO}13"
    wait_for("both apps to run", lambda: len(master_view()["activeapps"]) == 2, 240)
    apps = sorted(a["id"] for a in master_view()["activeapps"])
    begun = time.time()
    out = site.playbook(
        "spark.yml", "spark-decommission.log", "-e", json.dumps({"spark_workers_decommissioned": [worker]})
    )
    took = time.time() - begun
    states = {w["host"]: w["state"] for w in master_view()["workers"] if w["state"] != "DEAD"}
    print(f"\n[h] {worker} decommissioned in {took:.0f}s; workers {states}; apps {apps}")
    asked = rf"TASK \[spark : Ask the worker to decommission itself\].*\n(?:.*\n)?changed: \[{worker}\]"
    assert re.search(asked, out), "the worker was sent its decommission signal"
    assert sh(worker, "systemctl is-active spark-worker", check=False).strip() != "active"
    assert sh(worker, "systemctl is-enabled spark-worker", check=False).strip() == "disabled"
    assert states.get(address) != "ALIVE", "the master schedules nothing on the decommissioned worker"
    assert sorted(a["id"] for a in master_view()["activeapps"]) == apps, "the apps kept running"
    back = time.time()
    wait_for("both devices' readings after the decommission", lambda: after(site, back), 240)
    judge(site, "h: a worker decommissioned while the apps run")
    again = recap(
        site.playbook(
            "spark.yml",
            "spark-decommission-2.log",
            "-e",
            json.dumps({"spark_workers_decommissioned": [worker]}),
        )
    )
    assert set(again.values()) == {0}, f"a second decommission run changed something: {again}"
    site.playbook("spark.yml", "spark-recommission.log")  # its health gate waits for the worker ALIVE
    assert sh(worker, "systemctl is-active spark-worker", check=False).strip() == "active"
    assert sorted(a["id"] for a in master_view()["activeapps"]) == apps


REFLASHED_TO = "trixie"


@pytest.mark.migration
@pytest.mark.timeout(3600)
def test_the_fleet_reflashed_one_pi_at_a_time_while_the_agents_produce(site: Site) -> None:
    """A fleet moved to Trixie one Pi at a time, as Raspberry Pi advises (a re-flash, not an upgrade);
    on a Trixie lab, the same flow is a dead SD card replaced on each node in turn. Each node comes
    back as a new container with an empty disk. For a combined node, site.yml with it listed in
    kafka_format_unformatted_nodes formats it into the running cluster, takes its old metadata
    directory out of the voters and its new one in, rebuilds its replicas under the throttle (lifted
    after), and restarts no other broker. Without the list, site.yml refuses and says what to do;
    so does the preflight for a voter that the inventory dropped. The Spark master is re-flashed
    between the workers: a worker whose Python is not the driver's is held out of service until the
    master runs its release. The agents produce throughout (acks=all; their spools keep what is not
    acknowledged): afterwards every window is exact and no device's sequence has a gap."""
    spec = lab.spec_from_inventory(site.inventory)
    voters_before = quorum_voter_dirs(site)
    assert sorted(voters_before) == [1, 2, 3], f"three voters before: {voters_before}"

    # The operator's mistake first: two controllers moved out of kafka_controller are still voters.
    wrong = site.inventory.parent / "inventory-wrong"
    shutil.copytree(site.inventory, wrong, dirs_exist_ok=True)
    hosts = wrong / "hosts.yml"
    groups = yaml.safe_load(hosts.read_text())
    children = groups["all"]["children"]
    for host in BROKERS[1:]:
        children["kafka_broker"]["hosts"][host] = children["kafka_controller"]["hosts"].pop(host)
    hosts.write_text(yaml.safe_dump(groups))
    out = site.playbook("site.yml", "voters-refused.log", refused=True, inventory=wrong)
    assert "The controller quorum's voters include node id 2, 3" in out, out[-3000:]
    assert set(recap(out).values()) == {0}, "the preflight refused before any host was touched"

    release = dict.fromkeys([*BROKERS, MASTER], SUITE)
    rejoin: dict[str, float] = {}
    for index, node in enumerate([BROKERS[0], BROKERS[1], MASTER, BROKERS[2]]):
        kafka_node = node in BROKERS
        others = [b for b in BROKERS if b != node]
        since = {b: _active_since(b, "kafka") for b in others}
        flashed = time.time()
        lab.reflash(spec, [node], REFLASHED_TO)
        release[node] = REFLASHED_TO
        assert sh(node, ". /etc/os-release; echo $VERSION_CODENAME").strip() == REFLASHED_TO
        if index == 0:
            out = site.playbook("site.yml", f"reflash-{node}-refused.log", refused=True)
            assert f"{node} was formatted into cluster" in out and "kafka_format_unformatted_nodes" in out
        extra = ["-e", json.dumps({"kafka_format_unformatted_nodes": [node]})] if kafka_node else []
        begun = time.time()
        out = site.playbook("site.yml", f"reflash-{node}.log", *extra)
        rejoin[node] = time.time() - flashed
        voters = quorum_voter_dirs(site)
        print(
            f"\n[m] {node}: re-flashed with {REFLASHED_TO}, site.yml {time.time() - begun:.0f}s, "
            f"back in {rejoin[node]:.0f}s; voters {voters}"
        )
        if kafka_node:
            node_id = int(_meta(node)["node.id"])
            assert voters.get(node_id) == _meta(node)["directory.id"], f"{node}'s new directory is a voter"
            assert voters_before[node_id] not in voters.values(), f"{node}'s old directory left the voters"
            throttled = r"TASK \[kafka : Throttle the rebuild[^\n]*\n(?:[^\n]*\n){0,2}changed: "
            assert re.search(throttled, out), "the rebuild ran under the replication throttle"
            assert not throttles_left(site), "the replication throttle was lifted"
        restarted = sorted(b for b, t in since.items() if _active_since(b, "kafka") != t)
        assert not restarted, f"restarted without need: {restarted}"
        serving = {w for w in ("e2e-pi-2", "e2e-pi-3") if release[w] == release[MASTER]}
        alive = {w["host"] for w in master_view()["workers"] if w["state"] == "ALIVE"}
        assert alive == {f"{SUBNET_TO}1{w[-1]}" for w in serving}, f"workers in service {alive}, {release}"
        if index == 0:  # the fleet mid-migration: Bookworm and Trixie side by side stay changed=0
            again = recap(site.playbook("site.yml", f"reflash-{node}-again.log"))
            assert set(again.values()) == {0}, f"the mixed fleet's second run changed something: {again}"
    voters_after = quorum_voter_dirs(site)
    assert sorted(voters_after) == [1, 2, 3]
    assert sorted(voters_after.values()) == sorted(_meta(b)["directory.id"] for b in BROKERS)
    assert not set(voters_after.values()) & set(voters_before.values())
    loads, lagging = replica_loads(site)
    print(f"[m] rejoin times { ({n: round(t) for n, t in rejoin.items()}) }; replicas per broker {loads}")
    assert not lagging, f"replicas out of sync: {lagging}"
    assert max(loads.values()) - min(loads.values()) <= 1, f"replicas unbalanced: {loads}"
    back = time.time()
    wait_for("both devices' readings after the re-flashes", lambda: after(site, back), 240)
    judge(site, "m: the fleet re-flashed one Pi at a time")


def throttles_left(site: Site) -> list[str]:
    """The brokers and topics that still carry a replication throttle."""
    admin = KafkaAdminClient(**site.client())
    try:
        resources = [ConfigResource(ConfigResourceType.BROKER, str(n)) for n in (1, 2, 3)]
        resources += [ConfigResource(ConfigResourceType.TOPIC, t) for t in admin.list_topics()]
        found = admin.describe_configs(resources)
    finally:
        admin.close()
    return [
        f"{kind} {name}: {key}"
        for kind, by_name in found.items()
        for name, configs in by_name.items()
        for key in configs
        if "replication.throttled" in key
    ]


def quorum_voter_dirs(site: Site) -> dict[int, str]:
    """The controller quorum's voters: node id -> metadata directory id, as the quorum reports them."""
    admin = KafkaAdminClient(**site.client())
    try:
        quorum = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
    finally:
        admin.close()
    voters = quorum["current_voters"]
    return {v["replica_id"]: kafka_admin.kafka_uuid(v["replica_directory_id"]) for v in voters}


def replica_loads(site: Site) -> tuple[dict[int, int], list[str]]:
    """Replicas per broker, and the partitions whose replicas are not all in sync."""
    admin = KafkaAdminClient(**site.client())
    try:
        topics = admin.describe_topics()
    finally:
        admin.close()
    loads: Counter[int] = Counter()
    lagging = []
    for topic in topics:
        for p in topic["partitions"]:
            loads.update(p["replica_nodes"])
            if sorted(p["isr_nodes"]) != sorted(p["replica_nodes"]):
                lagging.append(f"{topic['name']}-{p['partition_index']}")
    return dict(loads), lagging


def _meta(node: str) -> dict[str, str]:
    text = sh(node, "cat /srv/pikit/kafka/data/meta.properties")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def _active_since(node: str, unit: str) -> str:
    return sh(node, f"systemctl show -p ActiveEnterTimestampMonotonic --value {unit}").strip()


# The kit before the reading contract's version 2: its agent release 0.1.0 writes version 1. A
# commit of this repository's own history, checked out beside it.
CONTRACT_V1_KIT = "2733c2e"
# Its apps cannot stand for the apps of before: they took options this kit's roles no longer pass
# (`--output-dir`, the roll-ups' Parquet, gone with issue 66) and ran one driver on shared storage,
# not an elected driver with its state in Kafka. The apps of before are this kit's, built from a
# checkout of HEAD whose contract reads version 1 alone.
V1_ONLY = ("SCHEMAS_READ = (1, 2)", "SCHEMAS_READ = (1,)")
CONTRACT = "contract/pikit_contract/readings.py"
EDGE_AGENT_FILTERS = load_filter_plugin("edge_agent", "edge_agent_filters")  # the roll-out gate's
STREAMING_APPS = list(APP_PORTS)


@pytest.mark.ops
@pytest.mark.timeout(2400)
def test_a_release_of_a_new_contract_version_waits_for_the_apps(site: Site) -> None:
    """The site as it ran before the contract's version 2: agents on 0.1.0 (version 1), apps that
    read version 1 alone. Rolling 0.2.0 (version 2) out is refused before any device changes,
    naming each app; the apps upgraded (submit.yml of this kit), the same roll-out goes through.
    The agents produce throughout, and every reading of both versions is in the aggregates, exact
    against a recompute of the raw topic."""
    old_kit, v1_apps = site.logs / "kit-contract-v1", site.logs / "kit-reads-v1"
    git = ["git", "-C", str(REPO), "worktree"]
    for path, commit in ((old_kit, CONTRACT_V1_KIT), (v1_apps, "HEAD")):
        subprocess.run([*git, "remove", "--force", path], check=False, capture_output=True)
        subprocess.run([*git, "add", "--detach", path, commit], check=True)
    contract = v1_apps / CONTRACT
    assert V1_ONLY[0] in contract.read_text(), f"{CONTRACT} no longer says {V1_ONLY[0]}"
    contract.write_text(contract.read_text().replace(*V1_ONLY))
    try:
        roll_out_a_contract_version(site, old_kit, v1_apps)
    finally:
        for path in (old_kit, v1_apps):
            subprocess.run([*git, "remove", "--force", path], check=False)


def roll_out_a_contract_version(site: Site, old_kit: Path, v1_apps: Path) -> None:
    old_release = cache_agent_release(old_kit)
    new_release = agent_release(REPO)
    assert (old_release, new_release) == ("0.1.0", "0.2.0")

    # Back to the site of before: the agents first (the running apps read both), then the apps.
    site.playbook("edge-upgrade.yml", "v-agents-old.log", "-e", f"edge_agent_version={old_release}")
    # The apps that read version 1 alone (bundle.py packs the checkout's own sources), with this
    # kit's roles and cache.
    old_apps = ["-e", f"pikit_kit_dir={v1_apps}", "-e", f"pikit_artifact_cache={artifacts.cache_dir()}"]
    for app in STREAMING_APPS:
        site.playbook("submit.yml", f"v-{app}-old.log", "-e", f"app={app}", *old_apps)
    wait_for("the old apps to say what they read", lambda: apps_read() == {(1,)})
    old_since = time.time()
    wait_for("version 1 of both devices", lambda: devices_writing(site, 1, old_since) >= set(EDGES), 240)

    # The new release, refused: no device changes, no agent restarts.
    runs = agent_runs()
    refused = site.playbook("edge-upgrade.yml", "v-refused.log", refused=True)
    assert f"agent release {new_release} writes version 2 of the reading contract" in refused, refused[-3000:]
    for port in APP_PORTS.values():
        for node in DRIVERS:  # the standby's code too: it is what runs after a takeover
            url = f"http://{SUBNET_TO}1{node[-1]}:{port}/metrics"
            assert f"the app at {url} reads version 1" in refused, refused[-3000:]
    assert "No device was changed." in refused
    assert agent_runs() == runs
    assert all(current == f"releases/{old_release}" for current, _ in runs.values())

    # Apps first, then agents.
    for app in STREAMING_APPS:
        site.playbook("submit.yml", f"v-{app}-new.log", "-e", f"app={app}")
    wait_for("the new apps to read both versions", lambda: apps_read() == {(1, 2)})
    site.playbook("edge-upgrade.yml", "v-agents-new.log")
    new_since = time.time()
    assert {sh(d, f"readlink {AGENT_DIR}/current").strip() for d in EDGES} == {f"releases/{new_release}"}
    wait_for("version 2 of both devices", lambda: devices_writing(site, 2, new_since) >= set(EDGES), 240)
    model = judge(site, "v: a contract version rolled out, apps first")
    for device in EDGES:
        assert not model.seq_gaps(device), f"{device}: a gap across the releases: {model.seq_gaps(device)}"
    print(f"\n[v] refused while the apps read version 1; rolled out after: {dict(versions_of(site))}")


AGENT_DIR = "/opt/edge-agent"


def agent_runs() -> dict[str, tuple[str, int]]:
    """Each device's release (where `current` points) and its agent's restarts."""
    return {d: (sh(d, f"readlink {AGENT_DIR}/current").strip(), restarts(d, "edge-agent")) for d in EDGES}


def apps_read() -> set[tuple[int, ...]]:
    return {tuple(schemas_read(app)) for app in STREAMING_APPS}


def agent_release(kit: Path) -> str:
    return artifacts.role_default_pyproject(kit / "edge_agent/pyproject.toml")


def cache_agent_release(kit: Path) -> str:
    """The agent release of another checkout of the kit, built into this kit's artifact cache as
    `make artifacts` builds its own."""
    release = agent_release(kit)
    cache = artifacts.cache_dir()
    manifest = artifacts.Manifest.load(cache / "MANIFEST.json")
    for name, folder in artifacts.AGENT_WHEELS:
        rel = artifacts.agent_wheel(kit, name, folder)
        if not manifest.verified(rel):
            artifacts.build_wheel(kit / folder, cache / "agent", cache / ".logs" / "agent-wheels.log")
            manifest.record(rel, "built:" + artifacts.tree_hash(kit / folder))
    return release


def schemas_read(app: str) -> list[int]:
    """The contract versions the app's metrics page says it reads, as the roll-out's gate reads them."""
    address = f"{SUBNET_TO}1{driver_of(app)[-1]}"
    with urllib.request.urlopen(f"http://{address}:{APP_PORTS[app]}/metrics", timeout=5) as response:
        page = response.read().decode()
    return list(EDGE_AGENT_FILTERS.edge_agent_schemas_read(page))


def versions_of(site: Site, since: float = 0) -> Counter[tuple[str, int | None]]:
    """(device, contract version) of the raw topic's records sent after `since` (Kafka's timestamp)."""
    return Counter(
        ((r.key or b"").decode(), contract_version(r.value))
        for r in read_to_end("sensor-readings", **site.client())
        if r.timestamp / 1000 >= since
    )


def devices_writing(site: Site, version: int, since: float) -> set[str]:
    return {device for (device, v) in versions_of(site, since) if v == version}


def read_offsets(site: Site) -> dict[int, int]:
    """How far the app has committed each readings partition: its batch log records each
    partition's commits apart (pikit_spark/partition_fold.py), each naming the partition's end."""
    ends: dict[int, int] = {}
    for n, value in enumerate(site.values(spark_batches_topic(APP))):
        for partition, end in Batch.logged(n, value).ends.items():
            ends[partition] = max(end, ends.get(partition, end))
    return ends


@pytest.mark.ops
def test_records_deleted_before_a_time_while_the_apps_run_leave_later_windows_exact(site: Site) -> None:
    """(z) Last, after the whole output's check, whose judges a cut would leave a hole in by
    design: with the agents producing and both apps running, playbooks/kafka-delete-records.yml
    deletes the readings topic's records before now. The apps keep running (same application ids,
    no restart, batches committed after the cut), and every window that starts after the cut is
    exact against a recompute over the records that remain, each once, with no gap in any
    device's sequence from its first remaining reading on. The alerts are not judged after a cut:
    anomaly_alerts' baselines keep what they learned from the deleted records (README)."""
    wait_for("both devices' readings", lambda: after(site, time.time() - 30), 240)
    apps = sorted(a["id"] for a in master_view()["activeapps"])
    before = {
        (node, unit): restarts(node, unit)
        for node in DRIVERS
        for unit in (APP_UNIT, "spark-app-anomaly-alerts")
    }
    read = read_offsets(site)
    cut = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(cut))
    out = site.playbook(
        "kafka-delete-records.yml",
        "delete-records.log",
        "-e",
        "topic=sensor-readings",
        "-e",
        f"before={stamp}",
    )
    deleted = [
        int(n) for n in re.findall(r"sensor-readings\[\d+\]: records \d+\.\.\d+ deleted \((\d+)\)", out)
    ]
    done_at = time.time()
    starts = read_ends(site, beginning=True)
    unread = sum(max(0, starts[p] - read.get(p, 0)) for p in starts)
    print(
        f"\n[z] records before {stamp} deleted: {sum(deleted)} in {len(deleted)} partitions, "
        f"{unread} of them past what {APP} had committed ({done_at - cut:.0f} s run)"
    )
    assert deleted and sum(deleted) > 0, out[-3000:]
    # The cut is each partition's first record stamped at or after it; producers' stamps interleave
    # by milliseconds, so one stamped just before may follow it and stay.
    oldest = min(r.timestamp for r in read_to_end("sensor-readings", **site.client())) / 1000
    assert oldest >= cut - 5, f"a record stamped {cut - oldest:.0f} s before the cut stays"

    # Two whole windows after the cut, closed by each device and committed.
    first_whole = (int(cut) // 60 + 1) * 60
    wait_for("readings two windows past the cut", lambda: after(site, first_whole + 2 * 60 + 15), 420)
    for app in (APP, "anomaly_alerts"):
        assert wait_for(
            f"{app} to commit after the cut",
            functools.partial(nemesis(site).committed_since, app, done_at),
            180,
        )
    assert sorted(a["id"] for a in master_view()["activeapps"]) == apps, "the apps kept running"
    assert {(node, unit): restarts(node, unit) for node, unit in before} == before, "no app restarted"

    def judged() -> tuple[Outcome, list[str]]:
        values, refused = site.readings()
        model = outcome(values, now=time.time(), timing=TIMING, refused=refused)
        expected = {k: v for k, v in model.windows.items() if k[3] >= first_whole and k[0] in EDGES}
        got = [
            v
            for v in site.values("sensor-aggregates")
            if key_of(v)[3] >= first_whole and key_of(v)[0] in EDGES
        ]
        found = compare(expected, got, complete=False)
        found += [f"{d}: seq gap {gap} after the cut" for d in EDGES for gap in model.seq_gaps(d)]
        return model, found + ([] if expected else ["no window after the cut in the model"])

    with contextlib.suppress(AssertionError):
        wait_for("the windows after the cut", lambda: not judged()[1], 300)
    model, found = judged()
    assert not found, "z:\n" + "\n".join(found[:30]) + app_journal()
    after_cut = [k for k in model.windows if k[3] >= first_whole and k[0] in EDGES]
    print(f"[z] {len(after_cut)} windows after the cut exact; remaining: {model.counts()}")
