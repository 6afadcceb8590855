"""The last phase of `make demo`: show what runs in the lab and how to use it."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ansible_collections.pikit.cluster.plugins.modules import kafka_admin
from kafka import KafkaConsumer, TopicPartition
from pikit_contract.readings import ContractError, decode_batch

from pikit import REPO
from pikit.site import Site
from pikit.status import collect, spark_parts
from pikit.status_render import text
from pikit.topic import mtls_client, read_to_end
from pikit_dev.lab import spec_from_inventory
from pikit_dev.lab_image import LAB_USER, lab_home, ssh_key


@dataclass(frozen=True)
class Topics:
    readings: str
    aggregates: str
    alerts: str

    @classmethod
    def of(cls, site: Site) -> Topics:
        return cls(
            *(str(site.setting(f"pikit_{name}_topic")) for name in ("readings", "aggregates", "alerts"))
        )


def show_kafka(site: Site, bootstrap: list[str], pki: Path, topics: Topics) -> None:
    admin_module = kafka_admin
    client = admin_module.connect(mtls_client(bootstrap, pki))
    try:
        lag = int(site.setting("kafka_max_quorum_lag"))
        health = admin_module.health_report(
            client, len(bootstrap), lag, float(site.setting("kafka_disk_warn_share"))
        )
        listed = sorted(
            (t["name"], len(t["partitions"]), len(t["partitions"][0]["replica_nodes"]))
            for t in client.describe_topics()
            if not t["name"].startswith("__")
        )
    finally:
        client.close()
    used = ", ".join(
        f"{broker}: {dirs[d]['used_share']:.0%}"
        for broker, dirs in sorted(health["disks"].items())
        for d in dirs
    )
    print(
        f"\nKafka (KRaft, mTLS): brokers {health['brokers']}, quorum leader {health['quorum_leader']}, "
        f"under-replicated partitions {len(health['under_replicated'])}, data disks used {used}"
    )
    for warning in health["disk_warnings"]:
        print(f"  warning: {warning}")
    for name, partitions, replicas in listed:
        print(f"  topic {name:<22} partitions {partitions}  replication {replicas}")
    tls = (
        f"-X security.protocol=ssl -X ssl.ca.location={pki}/trust.crt "
        f"-X ssl.certificate.location={pki}/clients/admin.crt -X ssl.key.location={pki}/clients/admin.key"
    )
    print(
        f"""
With the generated admin client certificate ({pki}/clients/admin.pem):
  list:     kcat -b {bootstrap[0]} {tls} -L
  produce:  echo '{{"hello": "pi"}}' | kcat -b {bootstrap[0]} {tls} -P -t {topics.readings} -k demo
  consume:  kcat -b {bootstrap[0]} {tls} -C -t {topics.readings} -o beginning -e
  python:   KafkaProducer(bootstrap_servers={bootstrap}, security_protocol="SSL",
                          ssl_cafile="{pki}/trust.crt", ssl_certfile="{pki}/clients/admin.pem")"""
    )


def show_readings(bootstrap: list[str], pki: Path, topics: Topics) -> None:
    """The latest reading per device and metric, straight from the readings topic."""
    records = read_to_end(topics.readings, **mtls_client(bootstrap, pki))
    latest: dict[tuple[str, str], Any] = {}
    counts: dict[str, int] = {}
    for record in records:
        try:
            readings = decode_batch(record.value)
        except ContractError:
            continue
        for reading in readings:
            latest[(reading.device, reading.metric)] = reading
            counts[reading.device] = counts.get(reading.device, 0) + 1
    if not latest:
        print(f"\nNo readings in {topics.readings} yet.")
        return
    print(f"\nReadings in Kafka ({topics.readings}): {counts}")
    for (device, metric), r in sorted(latest.items()):
        print(f"  {device:<8} {metric:<12} {r.value:>9.3f} {r.unit:<4} seq {r.seq}")


def show_spark(master: str, ui: int) -> None:
    try:
        with urllib.request.urlopen(f"http://{master}:{ui}/json/", timeout=10) as response:
            state = json.load(response)
    except OSError as exc:
        print(f"\nSpark master {master}: not answering ({exc})")
        return
    alive = [w for w in state["workers"] if w["state"] == "ALIVE"]
    print(f"\nSpark standalone {state['url']}: {len(alive)} workers ALIVE, {state['cores']} cores")
    for worker in alive:
        cores, memory = (
            f"{worker['coresused']}/{worker['cores']}",
            f"{worker['memoryused']}/{worker['memory']}",
        )
        used = f"cores {cores}  memory {memory} MB"
        print(f"  worker {worker['host']:<13} {used}  UI {worker['webuiaddress']}")
    for app in state.get("activeapps", []):
        print(f"  app    {app['name']:<20} {app['state']:<8} cores {app['cores']}  id {app['id']}")


def watch(
    bootstrap: list[str], pki: Path, topics: Topics, seconds: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A live table of the latest window per device x metric, and alerts as they arrive."""
    consumer = KafkaConsumer(
        **mtls_client(bootstrap, pki), enable_auto_commit=False, isolation_level="read_committed"
    )
    parts = [
        TopicPartition(topic, p)
        for topic in (topics.aggregates, topics.alerts)
        for p in sorted(consumer.partitions_for_topic(topic) or [])
    ]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    aggregates: list[dict[str, Any]] = []
    alerts: list[dict[str, Any]] = []
    live = sys.stdout.isatty()
    started, next_draw = time.monotonic(), 0.0
    print(
        f"\nWatching the aggregates and alerts topics for {seconds:.0f}s (PIKIT_DEMO_WATCH to change), and"
        " until the first windows are in (a device's window closes once that device's readings pass its end"
        " by the device slack, spark_device_slack_seconds)"
    )
    try:
        # On a fresh lab the first windows close a few minutes after the agents start.
        while time.monotonic() - started < seconds or (not aggregates and time.monotonic() - started < 420):
            for batch in consumer.poll(timeout_ms=1000).values():
                for record in batch:
                    doc = json.loads(record.value)
                    if record.topic == topics.alerts:
                        alerts.append(doc)
                        if not live and len(alerts) <= 10:
                            print(
                                "  "
                                + _alert_line(doc)
                                + ("  (further alerts: in the table)" if len(alerts) == 10 else "")
                            )
                    else:
                        aggregates.append(doc)
            if time.monotonic() >= next_draw:
                _draw_table(aggregates, alerts, live)
                next_draw = time.monotonic() + (5 if live else 30)
    finally:
        consumer.close()
    _draw_table(aggregates, alerts, live=False)
    return aggregates, alerts


def _alert_line(alert: dict[str, Any]) -> str:
    when, metric = _hms(alert["ts"]), f"{alert['device']} {alert['metric']}={alert['value']:.3f}"
    return f"ALERT {when} {metric}: {alert['reason']}"


def _hms(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S")


def _draw_table(aggregates: list[dict[str, Any]], alerts: list[dict[str, Any]], live: bool) -> None:
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for agg in aggregates:
        key = (agg["device"], agg["sensor"], agg["metric"])
        if key not in latest or agg["window_start"] >= latest[key]["window_start"]:
            latest[key] = agg
    heads = ("count", "min", "mean", "max", "stddev")
    lines = [f"{'device':<8} {'metric':<12} {'window (UTC)':<13} " + " ".join(f"{h:>9}" for h in heads)]
    for (device, _sensor, metric), a in sorted(latest.items()):
        lines.append(
            f"{device:<8} {metric:<12} {_hms(a['window_start'])[:5]}-{_hms(a['window_end'])[:5]}"
            + f"   {a['count']:>9}"
            + "".join(f" {a[k]:>9.3f}" for k in heads[1:])
        )
    lines.append(f"{len(aggregates)} windows, {len(alerts)} alerts so far")
    lines += [
        f"  ALERT {_hms(a['ts'])} {a['device']} {a['metric']}={a['value']:.3f}: {a['reason']}"
        for a in alerts[-5:]
    ]
    if live:
        print("\033[2J\033[H" + "Latest Spark window aggregates (the aggregates topic)\n" + "\n".join(lines))
    else:
        print("\n".join("  " + line for line in lines))


def save_picture(
    bootstrap: list[str],
    pki: Path,
    topics: Topics,
    aggregates: list[dict[str, Any]],
    alerts: list[dict[str, Any]],
) -> Path:
    from pikit_dev.picture import draw, page

    readings: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for record in read_to_end(topics.readings, **mtls_client(bootstrap, pki)):
        try:
            for r in decode_batch(record.value):
                readings[(r.device, r.metric)].append((r.ts, r.value))
        except ContractError:
            continue
    out = lab_home() / "demo" / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    draw(readings, aggregates, alerts, out / "pipeline.png")
    page(out / "pipeline.png", aggregates, alerts, out / "index.html")
    return out


def wait_for_first_batches(timeout: float = 900.0) -> None:
    """Until every streaming app has made its first micro-batches and keeps making them.

    The first batch of each app reads everything the agents sent since site.yml started them,
    on a lab that is still starting its JVMs: on 2 cores it has taken two minutes. That is a slow
    start, not a problem, so the demo waits for it here and says so, instead of showing it as a
    stalled query on its last screen."""
    site = Site.load(REPO / "inventory/lab")
    started = time.monotonic()
    said = ""
    while True:
        parts = spark_parts(site)
        apps = [part for part in parts if part.name.startswith("app ")]
        waiting = {
            part.name: "; ".join(part.problems) or "no micro-batch yet"
            for part in parts
            if (part.problems and part.name.startswith("master "))
            or (part in apps and (part.problems or not part.details.get("queries")))
        }
        elapsed = time.monotonic() - started
        if not waiting:
            batches = {p.name: [q["batch"] for q in p.details["queries"]] for p in apps}
            print(f"every streaming app is making micro-batches after {elapsed:.0f}s: {batches}")
            return
        if elapsed > timeout:
            print(f"after {elapsed:.0f}s the apps are not all making micro-batches: {waiting}")
            raise SystemExit(1)
        line = ", ".join(f"{name} ({why})" for name, why in sorted(waiting.items()))
        if line != said:
            print(f"  {elapsed:4.0f}s waiting for the first micro-batches of {line}")
            said = line
        time.sleep(5)


def show_status() -> None:
    """The same screen as `pikit status` on the lab."""
    site = Site.load(REPO / "inventory/lab")
    print("\n" + text(collect(site), color=sys.stdout.isatty()))


def main() -> None:
    if sys.argv[1:] == ["wait"]:
        wait_for_first_batches()
        return
    spec = spec_from_inventory(REPO / "inventory/lab")
    site = Site.load(REPO / "inventory/lab")
    print(f"\nThe lab '{spec.name}' is up and converged by playbooks/site.yml:")
    for node in spec.nodes:
        roles = site.model["hosts"][node.name]["groups"]
        print(f"  {node.name:<8} {node.ip:<13} {', '.join(roles)}")
    topics = Topics.of(site)
    bootstrap = site.endpoints("kafka-client", site.hosts("kafka_broker"))
    masters = site.hosts("spark_master")
    pki = site.state_dir / "pki"
    if bootstrap:
        show_kafka(site, bootstrap, pki, topics)
        if site.hosts("edge"):
            show_readings(bootstrap, pki, topics)
    if masters:
        show_spark(site.address(masters[0]), site.port("spark-master-ui", masters[0]))
    if bootstrap and masters:
        aggregates, alerts = watch(bootstrap, pki, topics, float(os.environ.get("PIKIT_DEMO_WATCH", "45")))
        out = save_picture(bootstrap, pki, topics, aggregates, alerts)
        print(f"\nPicture of the readings and aggregates: {out}/pipeline.png and {out}/index.html")
    master = site.address(masters[0]) if masters else "-"
    drivers = ", ".join(site.address(h) for h in site.hosts("spark_driver")) or master
    print(
        f"""
Spark master UI:     http://{master}:8080   (workers :8081)
The apps' drivers:   on {drivers}: the first active, the next standing by (UIs :4040, :4041)
Kafka:               {",".join(bootstrap)} (mTLS; client certificates under {pki})
Log in to a node:    ssh -i {ssh_key()} {LAB_USER}@{spec.nodes[0].ip}
                     (or: podman exec -it {spec.nodes[0].name} bash)
Services:            journalctl -u kafka | -u spark-master | -u spark-worker | -u spark-app-sensor-aggregates
Submit an app:       .venv/bin/ansible-playbook playbooks/submit.yml -e app=daily_rollup
Re-run the playbook: .venv/bin/ansible-playbook playbooks/site.yml   (a second run reports changed=0)
Site health:         .venv/bin/pikit status   (--json for scripts, --html FILE for a page)
Stop everything:     make lab-down"""
    )
    show_status()


if __name__ == "__main__":
    main()
