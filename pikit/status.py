"""`pikit status`: the whole site on one screen, from the controller.

Each part is read the way its own tools read it, never from a node's shell:
- the quorum and the brokers from the Kafka admin API (the kafka role's health report) with the
  controller's admin certificate;
- Spark from the master's JSON page, and each streaming app's backlog from its own metrics
  endpoint (spark_apps/pikit_spark/metrics.py);
- each agent from what it sent: the records of the last `lookback` in the readings topic carry the
  device's key, its release and its spool depth in headers, and the broker's timestamp. A device
  behind NAT or a cellular link is seen as well as one on the LAN;
- each node's OS release from its node exporter (`node_os_info`, /etc/os-release): a fleet moving
  from Bookworm to Trixie one Pi at a time shows where it stands. A node whose exporter does not
  answer is shown as unknown, not as a problem: a device may be out of the controller's reach.
Anything unhealthy becomes a problem with its reason; `healthy` is true when there is none.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ansible_collections.pikit.cluster.plugins.module_utils import mirror_lag
from ansible_collections.pikit.cluster.plugins.modules import kafka_admin, kafka_connectors
from cryptography import x509
from kafka import KafkaConsumer, TopicPartition
from pikit_contract.brokers import PROBE_TIMEOUT_S
from pikit_contract.readings import RELEASE_HEADER, SPOOL_HEADER
from pikit_contract.signing import Keyring, misplaced_reason, read_site_secret, verdict

from pikit import revocation
from pikit.prometheus import scrape, values
from pikit.site import Site
from pikit.site_model import driver_pis
from pikit.topic import answering_brokers, mtls_client

CERT_WARN_DAYS = 21
# A mirror's oldest record not yet on its core older than this is a problem (as the monitoring
# role's monitoring_mirror_behind_seconds).
MIRROR_BEHIND_SECONDS = 600


@dataclass
class Part:
    """One line of the screen: a node, an app or a device, and what is wrong with it."""

    name: str
    details: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems


@dataclass
class Status:
    site: str
    checked_at: float
    quorum: Part
    brokers: list[Part]
    spark: list[Part]
    agents: list[Part]
    nodes: list[Part] = field(default_factory=list)
    connectors: list[Part] = field(default_factory=list)

    def parts(self) -> list[tuple[str, Part]]:
        return [
            ("quorum", self.quorum),
            *(("broker", p) for p in self.brokers),
            *(("connector", p) for p in self.connectors),
            *(("spark", p) for p in self.spark),
            *(("agent", p) for p in self.agents),
            *(("node", p) for p in self.nodes),
        ]

    @property
    def problems(self) -> list[str]:
        return [f"{kind} {part.name}: {problem}" for kind, part in self.parts() for problem in part.problems]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["healthy"] = not self.problems
        out["problems"] = self.problems
        for section in ("brokers", "connectors", "spark", "agents", "nodes"):
            for part in out[section]:
                part["healthy"] = not part["problems"]
        out["quorum"]["healthy"] = not self.quorum.problems
        return out


def no_answer(address: str, port: int) -> str:
    """A broker that the probe left out (pikit.topic.answering_brokers): nothing listens, or it
    hangs, which its kernel's accepted connection would not tell."""
    return f"no answer on {address}:{port} within {PROBE_TIMEOUT_S:.0f} s"


def kafka_parts(site: Site, pki: Path, reachable: list[str]) -> tuple[Part, list[Part]]:
    brokers = site.hosts("kafka_broker")
    port = site.port("kafka-client", brokers[0]) if brokers else 0
    addresses = {site.address(host): host for host in brokers}
    quorum = Part("KRaft")
    parts = {host: Part(host, {"address": site.address(host)}) for host in brokers}
    if not reachable:
        quorum.problems.append(f"no broker answers on port {port}: the cluster is down")
        for part in parts.values():
            part.details["up"] = False
            part.problems.append(f"down: {no_answer(part.details['address'], port)}")
        return quorum, list(parts.values())
    max_lag = int(site.setting("kafka_max_quorum_lag"))
    warn = float(site.setting("kafka_disk_warn_share"))
    try:
        admin = kafka_admin.connect({**mtls_client(reachable, pki), "bootstrap_servers": reachable})
        try:
            health = kafka_admin.health_report(admin, len(brokers), max_lag, warn)
            cluster = admin.describe_cluster()
            topics = admin.describe_topics()
            described = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
        finally:
            admin.close()
    except Exception as exc:  # an election or a restart in progress: say so, do not crash
        quorum.problems.append(f"the admin API did not answer ({type(exc).__name__}: {exc})")
        for part in parts.values():
            part.details["up"] = f"{part.details['address']}:{port}" in reachable
            if not part.details["up"]:
                part.problems.append(f"down: {no_answer(part.details['address'], port)}")
        return quorum, list(parts.values())
    node_host = {b["broker_id"]: addresses.get(b["host"], b["host"]) for b in cluster["brokers"]}
    now_ms = time.time() * 1000
    leader = health["quorum_leader"]
    quorum.details = {
        "leader": leader,
        "leader_host": node_host.get(leader, str(leader)),
        "voters": [
            {
                "id": v["replica_id"],
                "lag": health["quorum_lag"].get(v["replica_id"], 0),
                "caught_up_s_ago": round((now_ms - v["last_caught_up_timestamp"]) / 1000, 1)
                if v.get("last_caught_up_timestamp", -1) >= 0
                else None,
            }
            for v in described["current_voters"]
        ],
        "observers": health["quorum_observers"],
    }
    if leader < 0:
        quorum.problems.append("no quorum leader")
    for voter in quorum.details["voters"]:
        if voter["lag"] > max_lag:
            quorum.problems.append(f"voter {voter['id']} is {voter['lag']} records behind the leader")
    hosted: dict[int, dict[str, int]] = defaultdict(lambda: {"partitions": 0, "leaders": 0, "urp": 0})
    for topic in topics:
        for p in topic["partitions"]:
            for replica in p["replica_nodes"]:
                hosted[replica]["partitions"] += 1
            if p["leader_id"] >= 0:
                hosted[p["leader_id"]]["leaders"] += 1
                if len(p["isr_nodes"]) < len(p["replica_nodes"]):
                    hosted[p["leader_id"]]["urp"] += 1
    registered = {node_host[b]: b for b in health["brokers"] if b in node_host}
    for host, part in parts.items():
        node = registered.get(host)
        part.details["up"] = node is not None
        if node is None:
            answering = f"{part.details['address']}:{port}" in reachable
            part.problems.append(
                "down: "
                + (
                    "answering but not registered with the controllers"
                    if answering
                    else no_answer(part.details["address"], port)
                )
            )
            continue
        part.details.update(node_id=node, **hosted[node])
        if part.details.get("urp"):
            part.problems.append(f"{part.details['urp']} under-replicated partitions it leads")
        for log_dir, disk in health["disks"].get(str(node), {}).items():
            part.details["disk_used"] = disk["used_share"]
            if disk["used_share"] is not None and disk["used_share"] >= warn:
                part.problems.append(f"disk {log_dir} {disk['used_share']:.0%} full (warns at {warn:.0%})")
    if health["offline"]:
        quorum.problems.append(
            f"{len(health['offline'])} partitions offline: {', '.join(health['offline'][:5])}"
        )
    return quorum, list(parts.values())


def _json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def worker_parts(
    registrations: list[dict[str, Any]],
    hosts_by_address: dict[str, str],
    decommissioned: set[str],
    held_out: dict[str, str] | None = None,
) -> list[Part]:
    """One part per worker host from the master's registrations (`/json/` workers). A worker that
    restarted or came back into service registers again under a new id and its old registration
    stays DEAD for a while: the live one speaks for the host. A worker the inventory took out of
    service (spark_workers_decommissioned), or that the spark role holds out for running another
    Raspberry Pi OS release than the master (`held_out`: host -> why), is expected to be gone; one
    still ALIVE is not."""
    held_out = held_out or {}
    by_host: dict[str, dict[str, Any]] = {}
    for worker in registrations:
        host = hosts_by_address.get(worker["host"], worker["host"])
        if host not in by_host or worker["state"] == "ALIVE":
            by_host[host] = worker
    parts = []
    for host in sorted(set(hosts_by_address.values()) | set(by_host)):
        found = by_host.get(host)
        part = Part(f"worker {host}")
        if found is not None:
            part.details.update(state=found["state"], cores=found["cores"], cores_used=found["coresused"])
        if host in decommissioned or host in held_out:
            part.details["in_service"] = False
            if host in held_out:
                part.details["held_out"] = held_out[host]
            why = "spark_workers_decommissioned lists it" if host in decommissioned else held_out[host]
            if found is not None and found["state"] == "ALIVE":
                part.problems.append(f"ALIVE, but {why}: playbooks/spark.yml not run")
        elif found is None:
            part.details["state"] = "missing"
            part.problems.append("not registered with the master")
        elif found["state"] != "ALIVE":
            part.problems.append(f"worker is {found['state']}")
        parts.append(part)
    return parts


def held_out_workers(workers: list[str], master: str, nodes: list[Part]) -> dict[str, str]:
    """The workers that run another OS release than the master, where the apps' drivers run: PySpark
    refuses executors of another Python minor version, and each Raspberry Pi OS release pins one
    (the spark role holds these workers out). A node whose release is unknown is not judged."""
    release = {n.name: str(n.details.get("os_version_id", "")) for n in nodes}
    name = {n.name: str(n.details.get("os", "")) for n in nodes}
    if not release.get(master):
        return {}
    return {
        w: f"it runs {name[w]}, the master {master} {name[master]} (PySpark needs one Python on both)"
        for w in workers
        if release.get(w) and release[w] != release[master]
    }


def spark_parts(site: Site, nodes: list[Part] | None = None) -> list[Part]:
    masters = site.hosts("spark_master")
    if not masters:
        return []
    address = site.address(masters[0])
    master = Part(f"master {masters[0]}", {"address": address})
    ui = site.port("spark-master-ui", masters[0])
    try:
        state = _json(f"http://{address}:{ui}/json/")
    except OSError as exc:
        master.problems.append(f"down: the master's page http://{address}:{ui}/json/ does not answer ({exc})")
        return [master]
    master.details.update(state=state.get("status", "?"), cores=state["cores"], cores_used=state["coresused"])
    parts = [master]
    hosts_by_address = {site.address(h): h for h in site.hosts("spark_worker")}
    decommissioned = set(site.setting("spark_workers_decommissioned") or [])
    held_out = held_out_workers(sorted(hosts_by_address.values()), masters[0], nodes or [])
    parts += worker_parts(state["workers"], hosts_by_address, decommissioned, held_out)
    apps = site.setting("spark_apps")
    running = {app["name"]: app for app in state.get("activeapps", [])}
    for name in site.setting("spark_site_apps"):
        part = Part(f"app {name}")
        app = running.get(name)
        if app is None:
            part.problems.append("not running on the cluster")
            parts.append(part)
            continue
        part.details.update(state=app["state"], cores=app["cores"])
        if app["state"] != "RUNNING":
            part.problems.append(f"app is {app['state']}")
        port = int(dict(apps.get(name, {})).get("metrics_port", 0))
        if port:
            active = _active_driver(part, site, port)
            if active:
                part.details["driver"] = active
                part.details["queries"] = _queries(part, f"http://{site.address(active)}:{port}/metrics")
        parts.append(part)
    return parts


def _active_driver(part: Part, site: Site, port: int) -> str | None:
    """The driver Pi that holds the app (pikit_app_active 1), among those of spark_driver (the
    master's Pi where the inventory names none); the others stand by."""
    drivers = driver_pis(site.groups)
    silent, standing = [], []
    for host in drivers:
        url = f"http://{site.address(host)}:{port}/metrics"
        try:
            samples = scrape(url, timeout=5)
        except OSError:
            silent.append(host)
            continue
        if any(s.name == "pikit_app_active" and s.value == 1 for s in samples):
            part.details["standby"] = [h for h in drivers if h != host]
            return host
        standing.append(host)
    part.problems.append(
        f"no driver holds the app: standing by {', '.join(standing) or 'none'}; "
        f"not answering {', '.join(silent) or 'none'}"
    )
    return None


def _queries(part: Part, url: str, stalled_after: float = 120.0) -> list[dict[str, Any]]:
    try:
        samples = scrape(url, timeout=5)
    except OSError as exc:
        part.problems.append(f"its metrics at {url} do not answer ({exc})")
        return []
    queries = []
    for s in samples:
        if s.name != "pikit_query_batch_id":
            continue
        query = s.labels["query"]
        behind = sum(values(samples, "pikit_query_records_behind", query=query))
        at = values(samples, "pikit_query_last_batch_end_timestamp_seconds", query=query)
        age = round(time.time() - at[0], 1) if at else None
        queries.append(
            {"query": query, "batch": int(s.value), "records_behind": int(behind), "progress_s_ago": age}
        )
        if age is not None and age > stalled_after:
            part.problems.append(f"query {query}: no micro-batch for {age:.0f} s")
    return queries


def agent_parts(
    site: Site, pki: Path, reachable: list[str], silent_after: float, lookback: float
) -> list[Part]:
    devices = site.hosts("edge")
    if not devices:
        return []
    topic = str(site.setting("pikit_readings_topic"))
    keyring = site_keyring(site)
    # Without Kafka, or without the keys that tell a device's records from a forger's, nothing
    # can be said of the devices: unknown, which is not their fault.
    judged = (
        _last_records(mtls_client(reachable, pki), topic, lookback, keyring)
        if reachable and keyring
        else None
    )
    last = judged.last if judged is not None else None
    now = time.time()
    revoked = revocation.load(site.state_dir / "revoked-devices.json")
    throttled = throttled_devices(site)
    parts = []
    for device in devices:
        part = Part(device)
        seen = last.get(device) if last is not None else None
        shut_out = revoked.get(device)
        if shut_out is not None:
            # Its silence is the revocation's doing: shown, not a problem.
            part.details["revoked"] = shut_out.revoked_at
            if shut_out.fence is None:
                part.problems.append("revocation unfinished: run playbooks/edge-revoke.yml again")
        elif keyring is None:
            part.details["last_reading"] = "unknown: this controller holds no device signing secret"
        elif last is None:
            part.details["last_reading"] = "unknown: no broker answers"
        elif seen is None:
            part.problems.append(f"silent: no reading in Kafka for more than {lookback / 60:.0f} min")
        else:
            ago = now - seen["ts"]
            part.details.update(
                last_reading_s_ago=round(ago, 1), version=seen["release"], spool=seen["spool"]
            )
            if ago > silent_after:
                part.problems.append(f"silent: last reading in Kafka {ago:.0f} s ago")
        if judged is not None and judged.forged_by.get(device):
            # Its own key signed records that claim other devices: only its key could, so it is the
            # device to look at (stolen?), never the ones it claims. Shown, not a problem of its
            # health: the apps dead-letter each such record with its signer, and whether the device
            # is stolen is the operator's call (playbooks/edge-revoke.yml).
            part.details["forged_records"] = judged.forged_by[device]
        if device in throttled:
            part.details["throttled_s"] = round(throttled[device], 3)
            part.problems.append(
                f"throttled: past its quota, the brokers delay it {throttled[device]:.1f} s a request"
            )
        # The pki role keeps a copy of each certificate it issued (issued/<host>-<service>.crt).
        expiry = _certificate_expiry(pki / "issued" / f"{device}-edge-agent.crt")
        if expiry is not None and shut_out is None:
            days = (expiry - now) / 86400
            part.details["certificate_days_left"] = round(days, 1)
            if days < CERT_WARN_DAYS:
                part.problems.append(f"certificate expires in {days:.0f} days")
        parts.append(part)
    return parts


def throttled_devices(site: Site) -> dict[str, float]:
    """Per device, the longest average delay a broker gives its produce requests for being past its
    quota (kafka_user_produce_throttle_time_seconds, from each broker's exporter); only those above 0."""
    exporters = site.endpoints("kafka-metrics", site.hosts("kafka_broker"))
    if not exporters:
        return {}

    def delays(exporter: str) -> list[tuple[str, float]]:
        try:
            samples = scrape(f"http://{exporter}/metrics", timeout=5)
        except (urllib.error.URLError, OSError, ValueError):
            return []  # a broker down is the brokers' part to report
        return [
            (s.labels.get("user", ""), s.value)
            for s in samples
            if s.name == "kafka_user_produce_throttle_time_seconds"
        ]

    found: dict[str, float] = {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        for user, delay in (d for page in pool.map(delays, exporters) for d in page):
            if delay > 0:
                found[user] = max(found.get(user, 0.0), delay)
    return found


@dataclass
class Seen:
    """What the readings topic's last `lookback` says of the devices: per device, its last record
    that is its own (signed by it, keyed by it, not past its revocation's fence); per signer, the
    records it signed that claim another device. A record no device's key vouches for says nothing
    of any device, nor does one outside its device's partition of the readings topic, which the
    apps dead-letter. A stolen device can write records, so only what a device's signature covers
    speaks for it."""

    last: dict[str, dict[str, Any]] = field(default_factory=dict)
    forged_by: dict[str, int] = field(default_factory=dict)

    def take(self, record: Any, keyring: Keyring, partitions: int) -> None:
        reason, signer = verdict(
            record.value or b"", record.headers, keyring, (record.partition, record.offset)
        )
        claimed = (record.key or b"").decode(errors="replace")
        if reason is not None:
            return
        if signer != claimed:
            self.forged_by[str(signer)] = self.forged_by.get(str(signer), 0) + 1
        elif misplaced_reason(signer, record.partition, partitions) is None:
            headers = dict(record.headers or [])
            spool = headers.get(SPOOL_HEADER)
            self.last[claimed] = {
                "ts": record.timestamp / 1000,
                "release": headers.get(RELEASE_HEADER, b"").decode() or None,
                "spool": int(spool) if spool else None,
            }


def site_keyring(site: Site) -> Keyring | None:
    """The keys of the site's devices, derived from the controller's site secret (as the apps'
    keyring is), with the revocations' fences; None where this controller holds no secret."""
    path = Path(str(site.setting("pikit_device_signing_secret_file")))
    if not path.exists():
        return None
    revoked = revocation.load(site.state_dir / "revoked-devices.json")
    return revocation.keyring(read_site_secret(str(path)), site.hosts("edge"), revoked)


def _last_records(client: dict[str, Any], topic: str, lookback: float, keyring: Keyring) -> Seen:
    """The span's records, judged by their signatures (Seen)."""
    consumer = KafkaConsumer(**client, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(parts)
        since = consumer.offsets_for_times({tp: int((time.time() - lookback) * 1000) for tp in parts})
        ends = consumer.end_offsets(parts)
        for tp in parts:
            found = since.get(tp)
            consumer.seek(tp, found.offset if found is not None else ends[tp])
        seen = Seen()
        remaining = {tp for tp in parts if consumer.position(tp) < ends[tp]}
        while remaining:
            batch = consumer.poll(timeout_ms=3000)
            if not batch:
                break
            for tp, records in batch.items():
                for r in records:
                    seen.take(r, keyring, len(parts))
                if consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        return seen
    finally:
        consumer.close()


def _certificate_expiry(path: Path) -> float | None:
    if not path.exists():
        return None
    return x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc.timestamp()


def os_release(address: str, port: int, timeout: float = 3.0) -> dict[str, str] | None:
    """The node's /etc/os-release as its node exporter reports it (`node_os_info`), or None when
    the exporter does not answer."""
    try:
        samples = scrape(f"http://{address}:{port}/metrics", timeout=timeout)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    info = next((s.labels for s in samples if s.name == "node_os_info"), None)
    return dict(info) if info is not None else None


def node_parts(site: Site) -> list[Part]:
    addresses = {host: site.address(host) for host in sorted(site.hosts("all"))}
    exporters = {host: site.addresses("node-exporter", [host]) for host in addresses}
    with ThreadPoolExecutor(max_workers=8) as pool:
        releases = list(pool.map(lambda found: os_release(*found[0]) if found else None, exporters.values()))
    parts = []
    for (host, address), release in zip(addresses.items(), releases, strict=True):
        part = Part(host, {"address": address})
        if release is None:
            where = "{}:{}".format(*exporters[host][0]) if exporters[host] else "no port (the site runs none)"
            part.details["os"] = f"unknown: no node exporter answers at {where}"
        else:
            part.details.update(
                os=release.get("pretty_name") or release.get("name", "?"),
                os_version_id=release.get("version_id", ""),
                os_codename=release.get("version_codename", ""),
            )
        parts.append(part)
    return parts


def connector_parts(site: Site, client: dict[str, Any] | None = None) -> list[Part]:
    """Each connector of the Kafka Connect workers (roles/connect) and its tasks, as any worker
    that answers sees them, and for a mirror to a core, how far the core's copy is behind (with
    `client`, the site's brokers); a site without workers has none."""
    workers = site.hosts("kafka_connect")
    if not workers:
        return []
    urls = [f"http://{endpoint}" for endpoint in site.endpoints("connect-rest", workers)]
    try:
        rest = kafka_connectors.Workers(urls, time.monotonic() + 5, timeout=5)
        seen, configs = rest.states(), rest.configs()
    except kafka_connectors.ConnectError as exc:
        return [Part("workers", {"workers": len(workers)}, [f"down: no worker's REST API answers ({exc})"])]
    parts = []
    for name, state in sorted(seen.items()):
        part = Part(
            name,
            {"state": state["connector"], "tasks": state["tasks"]},
            kafka_connectors.unsettled([name], seen),
        )
        config = configs.get(name, {})
        if config.get("connector.class", "").endswith(".MirrorSourceConnector") and client:
            _mirror_lag(part, config, urls, client)
        parts.append(part)
    return parts


def mirrored_topics(patterns: str, existing: set[str]) -> list[str]:
    """The site's topics a MirrorSourceConnector copies: its `topics` setting is a comma-separated
    list of regular expressions, each matching a whole name (the kit writes escaped names; a user
    may write `sensor-.*`). Kafka's internal topics (`__*`) are never copied."""
    regexes = [re.compile(pattern.strip()) for pattern in patterns.split(",") if pattern.strip()]
    return sorted(
        topic
        for topic in existing
        if not topic.startswith("__") and any(regex.fullmatch(topic) for regex in regexes)
    )


def _mirror_lag(part: Part, config: dict[str, str], urls: list[str], client: dict[str, Any]) -> None:
    """The mirror's lag per topic (the workers' probe's own measure), a problem past its bound."""
    part.details["core"] = config.get("target.cluster.alias", "?")
    try:
        positions = mirror_lag.committed(urls[0], part.name, timeout=10)
    except (OSError, ValueError) as exc:
        part.problems.append(f"its committed offsets cannot be read, so its lag is unknown ({exc})")
        return
    try:
        consumer = KafkaConsumer(**client)
        try:
            topics = mirrored_topics(config.get("topics", ""), consumer.topics())
        finally:
            consumer.close()
        lag = mirror_lag.lag(client, positions, topics, time.time())
    except Exception as exc:  # the site's brokers: reported, not raised
        part.problems.append(f"its lag could not be measured ({type(exc).__name__}: {exc})")
        return
    part.details["lag"] = lag
    lost = {topic: behind["lost"] for topic, behind in lag.items() if behind["lost"]}
    if lost:
        part.problems.append(f"the site deleted records before the core had them: {lost}")
    worst = max(lag.values(), key=lambda behind: behind["seconds"], default={"seconds": 0.0, "records": 0})
    if worst["seconds"] > MIRROR_BEHIND_SECONDS:
        part.problems.append(
            f"the core's copy is {worst['seconds']:.0f} s ({worst['records']} records) behind the site"
        )


def collect(site: Site, silent_after: float = 120.0, lookback: float = 900.0) -> Status:
    pki = site.state_dir / "pki"
    reachable = answering_brokers(site, pki, grace=PROBE_TIMEOUT_S)  # each broker judged
    quorum, brokers = kafka_parts(site, pki, reachable)
    nodes = node_parts(site)
    return Status(
        site=str(site.inventory),
        checked_at=time.time(),
        quorum=quorum,
        brokers=brokers,
        spark=spark_parts(site, nodes),
        agents=agent_parts(site, pki, reachable, silent_after, lookback),
        nodes=nodes,
        connectors=connector_parts(site, mtls_client(reachable, pki) if reachable else None),
    )


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
