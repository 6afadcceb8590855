"""The last phase of `make demo`: show what runs in the lab and how to use it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from pikit.kafka_admin import kafka_admin
from pikit.lab import REPO, spec_from_inventory
from pikit.lab_image import lab_home, ssh_key
from pikit.topic import read_to_end


def _inventory() -> dict[str, Any]:
    out = subprocess.run(
        [REPO / ".venv/bin/ansible-inventory", "-i", REPO / "inventory/lab", "--list"],
        capture_output=True,
        check=True,
    ).stdout
    return dict(json.loads(out))


def show_kafka(brokers: list[str], pki: Path) -> None:
    bootstrap = [f"{ip}:9092" for ip in brokers]
    admin_module = kafka_admin
    params = {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(pki / "ca.crt"),
        "ssl_certfile": str(pki / "clients/admin.pem"),
    }
    client = admin_module.connect(params)
    try:
        health = admin_module.health_report(client, len(brokers), 100)
        topics = sorted(
            (t["name"], len(t["partitions"]), len(t["partitions"][0]["replica_nodes"]))
            for t in client.describe_topics()
            if not t["name"].startswith("__")
        )
    finally:
        client.close()
    print(
        f"\nKafka (KRaft, mTLS): brokers {health['brokers']}, quorum leader {health['quorum_leader']}, "
        f"under-replicated partitions {len(health['under_replicated'])}"
    )
    for name, partitions, replicas in topics:
        print(f"  topic {name:<22} partitions {partitions}  replication {replicas}")
    tls = (
        f"-X security.protocol=ssl -X ssl.ca.location={pki}/ca.crt "
        f"-X ssl.certificate.location={pki}/clients/admin.crt -X ssl.key.location={pki}/clients/admin.key"
    )
    print(
        f"""
With the generated admin client certificate ({pki}/clients/admin.pem):
  list:     kcat -b {bootstrap[0]} {tls} -L
  produce:  echo '{{"hello": "pi"}}' | kcat -b {bootstrap[0]} {tls} -P -t sensor-readings -k demo
  consume:  kcat -b {bootstrap[0]} {tls} -C -t sensor-readings -o beginning -e
  python:   KafkaProducer(bootstrap_servers={bootstrap}, security_protocol="SSL",
                          ssl_cafile="{pki}/ca.crt", ssl_certfile="{pki}/clients/admin.pem")"""
    )


def show_readings(bootstrap: list[str], pki: Path) -> None:
    """The latest reading per device and metric, straight from the readings topic."""
    import sys

    sys.path.insert(0, str(REPO / "edge_agent"))
    from edge_agent.contract import ContractError, decode_batch

    records = read_to_end(
        "sensor-readings",
        bootstrap_servers=bootstrap,
        security_protocol="SSL",
        ssl_cafile=str(pki / "ca.crt"),
        ssl_certfile=str(pki / "clients/admin.pem"),
    )
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
        print("\nNo readings in sensor-readings yet.")
        return
    print(f"\nReadings in Kafka (sensor-readings): {counts}")
    for (device, metric), r in sorted(latest.items()):
        print(f"  {device:<8} {metric:<12} {r.value:>9.3f} {r.unit:<4} seq {r.seq}")


def main() -> None:
    spec = spec_from_inventory(REPO / "inventory/lab")
    inventory = _inventory()
    print(f"\nThe lab '{spec.name}' is up and converged by playbooks/site.yml:")
    groups = {g: v.get("hosts", []) for g, v in inventory.items() if isinstance(v, dict) and g != "_meta"}
    for node in spec.nodes:
        roles = [
            g for g, hosts in sorted(groups.items()) if node.name in hosts and g not in ("all", "ungrouped")
        ]
        print(f"  {node.name:<8} {node.ip:<13} {', '.join(roles)}")
    brokers = [n.ip for n in spec.nodes if n.name in groups.get("kafka_broker", [])]
    if brokers:
        pki = lab_home() / "state" / spec.name / "pki"
        show_kafka(brokers, pki)
        if groups.get("edge"):
            show_readings([f"{ip}:9092" for ip in brokers], pki)
    print(
        f"""
Log in to a node:    ssh -i {ssh_key()} root@{spec.nodes[0].ip}
                     (or: podman exec -it {spec.nodes[0].name} bash)
Kafka on a node:     systemctl status kafka; journalctl -u kafka; kafka-run <tool class> ...
Re-run the playbook: .venv/bin/ansible-playbook playbooks/site.yml   (a second run reports changed=0)
Stop everything:     make lab-down"""
    )


if __name__ == "__main__":
    main()
