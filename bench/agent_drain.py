"""Drain rate of a full agent spool into an mTLS broker (acks=all), beside kcat and Kafka's own producer.

One run, same machine, same broker, same readings: the agent's sender draining a
spool of N readings; kcat producing the same readings one per message and batched
the agent's way (100 per record); Kafka's ProducerPerformance from the cache. Each
producer is pinned to one core (taskset) while the broker has the other. Results are
readings per second and ratios to kcat, since these machines are noisy.

    .venv/bin/python -m bench.agent_drain [--readings 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pikit.localkafka import REPO, LocalBroker
from pikit.testcerts import certificate, new_key, pem

sys.path.insert(0, str(REPO / "edge_agent"))

from edge_agent.config import parse
from edge_agent.contract import Reading
from edge_agent.metrics import Metrics
from edge_agent.sender import Sender, envelope
from edge_agent.spool import Record, Spool

PER_RECORD = 100


def make_tls(work: Path) -> dict[str, Path]:
    ca_key, key = new_key(), new_key()
    ca = certificate("bench CA", ca_key, "bench CA", ca_key, ca=True)
    leaf = certificate("bench", key, "bench CA", ca_key, ip="127.0.0.1")
    files = {
        "ca": work / "ca.crt",
        "bundle": work / "bench.pem",
        "cert": work / "bench.crt",
        "key": work / "bench.key",
    }
    files["ca"].write_bytes(pem(None, ca))
    files["cert"].write_bytes(pem(None, leaf))
    files["key"].write_bytes(pem(key))
    files["bundle"].write_bytes(pem(key, leaf))
    return files


def readings(n: int) -> list[bytes]:
    now = time.time()
    return [
        json.dumps(
            Reading("bench", i, "bme280", "temperature", 20.0 + (i % 100) / 10, "C", now + i / 100).body(),
            separators=(",", ":"),
        ).encode()
        for i in range(n)
    ]


def agent_drain(work: Path, broker: str, tls: dict[str, Path], bodies: list[bytes], topic: str) -> float:
    spool = Spool(work / "spool", max_bytes=1 << 30, segment_bytes=8 << 20, fsync="never")
    for i, body in enumerate(bodies):
        spool.append(i, body)
    config = parse(
        {
            "device_id": "bench",
            "kafka": {
                "bootstrap_servers": [broker],
                "topic": topic,
                "ca_file": str(tls["ca"]),
                "cert_file": str(tls["bundle"]),
                "readings_per_record": PER_RECORD,
            },
            "spool": {"directory": str(work / "spool")},
            "metrics": {"listen": ""},
            "sensors": [{"type": "system"}],
        }
    )
    os.sched_setaffinity(0, {1})
    stop = threading.Event()
    sender = Sender(config, spool, Metrics(), threading.Event())
    started = time.monotonic()
    thread = threading.Thread(target=sender.run, args=(stop, [float("inf")]))
    thread.start()
    while spool.depth:
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    stop.set()
    thread.join()
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return len(bodies) / elapsed


def kcat(broker: str, tls: dict[str, Path], lines: list[bytes], topic: str, work: Path) -> float:
    data = work / f"{topic}.txt"
    data.write_bytes(b"\n".join(lines) + b"\n")
    cmd = [
        "taskset", "-c", "1", "kcat", "-P", "-b", broker, "-t", topic, "-l", str(data),
        "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={tls['ca']}",
        "-X", f"ssl.certificate.location={tls['cert']}", "-X", f"ssl.key.location={tls['key']}",
        "-X", "acks=all", "-X", "enable.idempotence=true",
        "-X", "linger.ms=50", "-X", "compression.codec=zstd",
    ]  # fmt: skip
    started = time.monotonic()
    subprocess.run(cmd, check=True)
    return time.monotonic() - started


def producer_performance(
    home: Path, broker: str, tls: dict[str, Path], n: int, size: int, topic: str
) -> float:
    props = [
        f"bootstrap.servers={broker}", "acks=all", "security.protocol=SSL", "ssl.keystore.type=PEM",
        f"ssl.keystore.location={tls['bundle']}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={tls['ca']}",
        "linger.ms=50", "compression.type=zstd",
    ]  # fmt: skip
    cmd = [
        "taskset", "-c", "1", "java", "-Xmx512m", "-cp", f"{home}/libs/*",
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(n),
        "--record-size", str(size), "--throughput", "-1", "--producer-props", *props,
    ]  # fmt: skip
    started = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readings", type=int, default=200_000)
    args = parser.parse_args()
    n = args.readings
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tls = make_tls(work)
        broker = LocalBroker(work / "kafka", tls=(tls["bundle"], tls["ca"]))
        broker.start()
        os.sched_setaffinity(broker.proc.pid if broker.proc else 0, {0})
        try:
            bodies = readings(n)
            size = sum(map(len, bodies)) // n
            results = {
                "edge agent (100 readings/record)": agent_drain(work, broker.address, tls, bodies, "b-agent")
            }
            results["kcat (1 reading/message)"] = n / kcat(broker.address, tls, bodies, "b-kcat", work)
            records = [
                envelope("bench", [Record(i + j, i + j, b) for j, b in enumerate(bodies[i : i + PER_RECORD])])
                for i in range(0, n, PER_RECORD)
            ]
            results["kcat (100 readings/record)"] = n / kcat(
                broker.address, tls, records, "b-kcat-batched", work
            )
            elapsed = producer_performance(broker.home, broker.address, tls, n, size, "b-perf")
            results["Kafka ProducerPerformance (1 reading/message)"] = n / elapsed
        finally:
            broker.stop()
    kcat_rate = results["kcat (1 reading/message)"]
    print(f"\n{n} readings of {size} bytes, mTLS, acks=all, one core per producer\n")
    print("| producer | readings/s | vs kcat |\n|---|---:|---:|")
    for name, rate in results.items():
        print(f"| {name} | {rate:,.0f} | {rate / kcat_rate:.2f} |")


if __name__ == "__main__":
    main()
