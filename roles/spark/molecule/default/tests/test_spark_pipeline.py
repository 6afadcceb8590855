"""Verify the spark role's cluster and sensor_aggregates on it (molecule verify).

Runs on the controller against the lab: a real standalone master and two workers, a
real Kafka broker, the app submitted by playbooks/submit.yml. A test device sends a
known stream (resends, malformed records and readings, a reading from the future,
late readings); the
aggregates topic must hold exactly what pikit_testkit/pipeline_model.py computes from it,
also when the driver is killed -9 between a batch's Kafka commit and Spark's checkpoint
commit.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from pikit_contract import signing
from pikit_contract.readings import Reading, encode_batch
from pikit_testkit.pipeline_model import Outcome, authentic, compare, compare_late, outcome
from pikit_testkit.polling import wait_for

from pikit.topic import mtls_client, read_to_end

MASTER_NAME, _, MASTER_IP = os.environ.get("SPARK_TEST_MASTER", "").partition("=")
WORKERS = [w for w in os.environ.get("SPARK_TEST_WORKERS", "").split(",") if w]
BOOTSTRAP = [b for b in os.environ.get("SPARK_TEST_BROKERS", "").split(",") if b]
PKI = Path(os.environ.get("PIKIT_STATE_DIR", "/nonexistent")) / "pki"
APP = "sensor_aggregates"

if not MASTER_IP:
    pytest.fail("no lab to verify: SPARK_TEST_MASTER is unset (run through molecule)", pytrace=False)


def client(principal: str) -> dict[str, Any]:
    return mtls_client(BOOTSTRAP, PKI, principal)


def master_json() -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{MASTER_IP}:8080/json/", timeout=10) as response:
        return dict(json.load(response))


def app_ids() -> list[str]:
    return [a["id"] for a in master_json().get("activeapps", []) if a["name"] == APP]


def values(topic: str) -> list[bytes]:
    return [r.value for r in read_to_end(topic, **client("admin"))]


def model_now() -> Outcome:
    kept, refused = readings()
    return outcome(kept, now=time.time(), refused=refused)


def readings() -> tuple[list[bytes], list[bytes]]:
    """The raw topic's values the app reads, and those it refuses for their signature."""
    secret = signing.read_site_secret(str(PKI.parent / "device-signing-secret"))
    keys = {device: signing.device_key(secret, device) for device in ("dev-a", "dev-b")}
    records = read_to_end("sensor-readings", **client("admin"))
    consumer = KafkaConsumer(**client("admin"))
    try:
        partitions = len(consumer.partitions_for_topic("sensor-readings") or ())
    finally:
        consumer.close()
    return authentic(((r.value, r.headers, r.partition) for r in records), keys, partitions)


class Device:
    """A test device: deterministic readings, batched into records as the agent does."""

    def __init__(self, name: str, seed: int) -> None:
        self.name, self.seq, self.rng = name, 0, random.Random(seed)

    def readings(self, start: float, seconds: int, step: int = 5) -> list[Reading]:
        out = []
        for offset in range(0, seconds, step):
            for metric in ("temperature", "humidity"):
                value = round(self.rng.uniform(-10.0, 40.0), 3)
                out.append(Reading(self.name, self.seq, "sim", metric, value, "C", start + offset + 0.5))
                self.seq += 1
        return out

    def records(self, readings: list[Reading], per_record: int = 10) -> list[bytes]:
        return [
            encode_batch(self.name, readings[i : i + per_record]) for i in range(0, len(readings), per_record)
        ]


def test_spark_home_is_the_expected_distribution() -> None:
    """The scenario installs Spark from a tarball; the e2e test covers the pyspark wheel."""
    expected = os.environ.get("SPARK_TEST_SPARK_HOME", "site-packages/pyspark")
    home = subprocess.run(
        ["podman", "exec", MASTER_NAME, "readlink", "-f", "/opt/spark/current"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert home.endswith(expected), home


def test_workers_are_alive() -> None:
    alive = sorted(w["host"] for w in master_json()["workers"] if w["state"] == "ALIVE")
    assert alive == sorted(WORKERS)


def test_aggregates_are_exact_across_a_driver_crash() -> None:
    base = (int(time.time()) // 60 - 10) * 60
    devices = [Device("dev-a", 1), Device("dev-b", 2)]
    producer = KafkaProducer(**client("edge-sim"), acks="all")
    secret = signing.read_site_secret(str(PKI.parent / "device-signing-secret"))

    def send(records: list[bytes], key: str) -> None:
        device_key = signing.device_key(secret, key)
        for value in records:
            headers = signing.headers(key, device_key, value)
            producer.send("sensor-readings", key=key.encode(), value=value, headers=headers)
        producer.flush()

    shape = {"sensor": "sim", "metric": "temperature", "unit": "C"}
    malformed = [
        b"not json",
        b'{"schema": 2, "device": "dev-a", "readings": [{}]}',
        b'{"schema": 1, "device": "dev-a", "readings": []}',
        # A valid record with two broken readings (a string value, a ts in 1970).
        json.dumps(
            {
                "schema": 1,
                "device": "dev-b",
                "readings": [
                    {**shape, "seq": 9000, "value": "hot", "ts": base + 1},
                    {**shape, "seq": 9001, "value": 1.0, "ts": 5},
                ],
            }
        ).encode(),
        # A device clock an hour ahead: a dead letter, and no window of dev-b moves.
        json.dumps(
            {
                "schema": 1,
                "device": "dev-b",
                "readings": [
                    {**shape, "seq": 9002, "value": 1.0, "ts": time.time() + 3600},
                ],
            }
        ).encode(),
    ]
    first = {d.name: d.records(d.readings(base, 150)) for d in devices}
    second = {d.name: d.records(d.readings(base + 150, 150)) for d in devices}

    # Part one, with a resent record per device (an agent crash) and the malformed ones.
    for name, records in first.items():
        send(records + records[3:4], name)
    send(malformed, "dev-b")
    wait_for("the dead letters", lambda: len(values("sensor-dead-letter")) >= 6)

    # The driver dies right after the next batch's Kafka commit, before Spark's checkpoint
    # commit (a failpoint, so not by luck); systemd brings it back, it replays that batch.
    (before,) = wait_for("the app to run", lambda: app_ids() if len(app_ids()) == 1 else None)
    arm_failpoint("after-kafka-commit")
    for name, records in second.items():
        send(records + records[:2], name)
    wait_for("the app to come back under a new id", lambda: app_ids() and app_ids() != [before])
    assert not failpoint_armed("after-kafka-commit"), "the failpoint did not fire"

    # Late readings of dev-a's first window, sent once that window is out: the late topic.
    first_window = ("dev-a", "sim", "temperature", base)
    wait_for("dev-a's first window", lambda: first_window in keys("sensor-aggregates"))
    late = Device("dev-a", 4)
    late.seq = 10_000
    send(late.records(late.readings(base + 30, 20)), "dev-a")

    def problems() -> list[str]:
        model = model_now()
        return compare(model.windows, values("sensor-aggregates")) + compare_late(
            model.late, values("sensor-late")
        )

    wait_for("the aggregates and late readings of the model", lambda: not problems(), timeout=180)
    model = model_now()
    print(f"spark verifier: {model.counts()}")
    assert not problems(), "\n".join(problems())
    assert sorted(values("sensor-dead-letter")) == sorted(model.dead)
    assert len(model.dead) == 6 and len(model.late) == 8 and model.duplicates == 60
    assert {k[0] for k in model.open_windows} == {"dev-a", "dev-b"}, "each device's last window waits for it"


# spark_data_dir/scratch/<app> on the lab: the driver's scratch, where a test arms its failpoints.
CHECKPOINT = "/srv/pikit/spark/scratch/sensor_aggregates"


def arm_failpoint(name: str) -> None:
    # The driver runs as spark and must be able to remove the file.
    directory = f"{CHECKPOINT}/failpoints"
    script = f"install -d -o spark -g spark {directory} && install -o spark /dev/null {directory}/{name}"
    subprocess.run(["podman", "exec", MASTER_NAME, "sh", "-c", script], check=True)


def failpoint_armed(name: str) -> bool:
    probe = ["podman", "exec", MASTER_NAME, "test", "-e", f"{CHECKPOINT}/failpoints/{name}"]
    return subprocess.run(probe, check=False).returncode == 0


def keys(topic: str) -> set[tuple[str, str, str, int]]:
    return {_key(v) for v in values(topic)}


def _key(value: bytes) -> tuple[str, str, str, int]:
    doc = json.loads(value)
    return doc["device"], doc["sensor"], doc["metric"], int(doc["window_start"])


def test_executors_ran_on_the_workers() -> None:
    with urllib.request.urlopen(f"http://{MASTER_IP}:4040/api/v1/applications", timeout=10) as response:
        (app,) = json.load(response)
    url = f"http://{MASTER_IP}:4040/api/v1/applications/{app['id']}/executors"
    with urllib.request.urlopen(url, timeout=10) as response:
        executors = [e for e in json.load(response) if e["id"] != "driver"]
    hosts = sorted(e["hostPort"].rsplit(":", 1)[0] for e in executors)
    assert hosts == sorted(WORKERS)
    assert all(e["totalTasks"] > 0 for e in executors)
