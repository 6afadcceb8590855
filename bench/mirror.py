"""A site's mirror to its core: the Connect worker's footprint on the role's Pi-sized heap, and how fast
it copies a backlog, beside what the site's broker accepts from Kafka's own producer in the same run.

The site and the core are real KRaft brokers on loopback, each with its own CA (mTLS, PEM); the worker
runs the connect role's configuration, its JVM options (`connect_heap_mb`, `connect_jvm_extra_opts`
from roles/connect/defaults/main.yml) and the mirror's two connectors from the role's filter, exactly
once and read_committed (pikit_testkit.mirror_pair). Two profiles, each a topic of the site:

- aggregates: records of the size of a window's aggregate, 3 partitions (the kafka role's);
- readings: records of 100 readings, the agent's envelope, 6 partitions.

Each round, for each profile, with the mirror paused:

1. "site accepts": Kafka's ProducerPerformance writes N records to the site's topic, acks=all,
   idempotent, over mTLS, no compression and the client's default batching (as the mirror's own
   producer to the core), timed from its start to its exit. That is the ceiling of what the site
   takes in, and it leaves the backlog the mirror then copies.
2. "mirror": the mirror resumes, timed until its committed source offsets (what it wrote to the core
   in the same transactions) reach the site's end offsets.

A first round warms the JVMs up and is not counted. Start-up is measured once per contender on one
record (the producer's JVM; the task's restart on resume) and reported as a share of a run. Nothing
is pinned: the three JVMs and the producer share this machine's cores, as a Pi's share its four. At
the end the core's copies are read back, read_committed, and compared with the site's record by
record.

    .venv/bin/python -m bench.mirror [--rounds 3] [--aggregates 500000] [--readings 20000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.pikit.cluster.plugins.module_utils import mirror_lag
from ansible_collections.pikit.cluster.plugins.modules import kafka_connectors
from pikit_testkit.mirror import difference, records
from pikit_testkit.mirror_pair import Clusters, mirror_pair

from bench.proc import status_kib
from pikit import REPO

SITE = "greenhouse"
# Bytes per record: an aggregate of sensor_aggregates' output, and 100 readings of 103 bytes in the
# agent's envelope (bench/README.md, the agent's drain).
PROFILES = {"aggregates": (260, 3), "readings": (10_400, 6)}
# Reading millions of records back with kafka-python takes minutes.
READ_BACK_S = 1800
ROLE = yaml.safe_load((REPO / "roles/connect/defaults/main.yml").read_text())
WORKER_JVM = [
    f"-Xms{ROLE['connect_heap_mb']}m",
    f"-Xmx{ROLE['connect_heap_mb']}m",
    *ROLE["connect_jvm_extra_opts"].split(),
]


@dataclass
class Footprint:
    """The worker's resident memory, sampled every half second."""

    pid: int
    samples: list[tuple[str, int]] = field(default_factory=list)
    phase: str = "idle"
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            try:
                self.samples.append((self.phase, status_kib(self.pid, "VmRSS")))
            except FileNotFoundError:  # the worker stopped
                return

    def heap_used_mb(self) -> float:
        """The heap in use after a full collection (`jcmd GC.run`, then `jstat -gc`)."""
        subprocess.run(["jcmd", str(self.pid), "GC.run"], check=True, capture_output=True)
        out = subprocess.run(
            ["jstat", "-gc", str(self.pid)], check=True, capture_output=True, text=True
        ).stdout
        header, values = (line.split() for line in out.strip().splitlines()[-2:])
        gc = {k: float(v) for k, v in zip(header, values, strict=True) if v != "-"}
        return sum(gc[k] for k in ("S0U", "S1U", "EU", "OU")) / 1024


def produce(pair: Clusters, topic: str, count: int, size: int) -> float:
    """ProducerPerformance into the site's topic: seconds from its start to its exit."""
    props = [
        f"bootstrap.servers={pair.site.address}",
        "acks=all",
        "enable.idempotence=true",
        "compression.type=none",
        "security.protocol=SSL",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={pair.site_admin['ssl_certfile']}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pair.site_admin['ssl_cafile']}",
    ]
    tool = "org.apache.kafka.tools.ProducerPerformance"
    argv = ["java", "-Xmx1g", "-cp", f"{pair.site.home}/libs/*", tool, "--topic", topic]
    argv += ["--num-records", str(count), "--record-size", str(size), "--throughput", "-1"]
    started = time.perf_counter()
    subprocess.run([*argv, "--producer-props", *props], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def end_offsets(pair: Clusters, topic: str) -> dict[tuple[str, int], int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**pair.site_admin)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return {(t.topic, t.partition): o for t, o in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


class Mirror:
    def __init__(self, pair: Clusters) -> None:
        self.pair = pair
        self.name = f"{SITE}.mirror"
        self.rest = kafka_connectors.Workers([pair.worker.url], time.monotonic() + 3600)

    def tasks(self) -> list[str]:
        states: dict[str, Any] = self.rest.states()
        return list(states.get(self.name, {}).get("tasks", []))

    def pause(self) -> None:
        self.rest.call("PUT", f"/connectors/{self.name}/pause")
        deadline = time.monotonic() + 120
        while self.tasks() != ["PAUSED"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert self.tasks() == ["PAUSED"], self.tasks()

    def copy(self, target: dict[tuple[str, int], int], timeout: float = 3600) -> float:
        """Resume; seconds until what the mirror committed reaches `target`."""
        started = time.perf_counter()
        self.rest.call("PUT", f"/connectors/{self.name}/resume")
        deadline = time.monotonic() + timeout
        while True:
            done = mirror_lag.committed(self.pair.worker.url, self.name)
            if all(done.get(tp, 0) >= offset for tp, offset in target.items() if offset):
                return time.perf_counter() - started
            assert time.monotonic() < deadline, f"the mirror stalled at {done}, short of {target}"
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--aggregates", type=int, default=500_000, help="records per round")
    parser.add_argument("--readings", type=int, default=20_000, help="records of 100 readings per round")
    args = parser.parse_args()
    counts = {"aggregates": args.aggregates, "readings": args.readings}
    topics = {f"bench-{name}": partitions for name, (_, partitions) in PROFILES.items()}
    runs: dict[tuple[str, str], list[float]] = {}
    start_up: dict[tuple[str, str], float] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        mirror_pair(Path(tmp), SITE, topics, False, WORKER_JVM) as pair,
    ):
        result = pair.worker.reconcile(pair.connectors, settle_seconds=10)
        assert not result.get("failed"), result
        assert pair.worker.proc is not None
        footprint = Footprint(pair.worker.proc.pid)
        sampler = threading.Thread(target=footprint.run, daemon=True)
        sampler.start()
        mirror = Mirror(pair)
        time.sleep(30)  # the worker idle, its two connectors running
        idle_heap = footprint.heap_used_mb()
        footprint.phase = "copy"
        for name, (size, _) in PROFILES.items():  # start-up: one record each
            topic = f"bench-{name}"
            mirror.pause()
            start_up[(name, "site accepts")] = produce(pair, topic, 1, size)
            start_up[(name, "mirror")] = mirror.copy(end_offsets(pair, topic))
        # Round 0 warms the JVMs up (three of them, C2 compiling for the first minutes) and is not
        # counted: rates rose 2-4 times over the first three rounds of a run without it.
        for r in range(args.rounds + 1):
            for name, (size, _) in PROFILES.items():
                topic, n = f"bench-{name}", counts[name]
                mirror.pause()
                produced = n / produce(pair, topic, n, size)
                copied = n / mirror.copy(end_offsets(pair, topic))
                label = f"round {r}" if r else "warm-up (not counted)"
                print(f"{label} {name}: site accepts {produced:,.0f}/s, mirror {copied:,.0f}/s", flush=True)
                if r:
                    runs.setdefault((name, "site accepts"), []).append(produced)
                    runs.setdefault((name, "mirror"), []).append(copied)
        footprint.phase = "after"
        time.sleep(5)
        after_heap = footprint.heap_used_mb()
        peak = status_kib(footprint.pid, "VmHWM")
        footprint.stop.set()
        report(args.rounds, counts, runs, start_up, footprint, idle_heap, after_heap, peak)
        for name in PROFILES:
            topic = f"bench-{name}"
            want = records(topic, pair.site_admin, READ_BACK_S)
            got = records(f"{SITE}.{topic}", pair.core_admin, READ_BACK_S)
            assert got == want, difference(want, got)
            count = sum(map(len, got.values()))
            print(f"[read back] {SITE}.{topic} on the core equals the site's: {count:,} records")


def report(
    rounds: int,
    counts: dict[str, int],
    runs: dict[tuple[str, str], list[float]],
    start_up: dict[tuple[str, str], float],
    footprint: Footprint,
    idle_heap: float,
    after_heap: float,
    peak_kib: int,
) -> None:
    print(f"\nworker JVM: {' '.join(WORKER_JVM)}; {rounds} rounds\n")
    columns = ["profile", "contender", "median records/s", "min", "max", "MB/s (median)", "start-up share"]
    columns.append("warm median")
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (name, who), rates in runs.items():
        median = statistics.median(rates)
        size, n = PROFILES[name][0], counts[name]
        share = start_up[(name, who)] / (n / median)
        # Warm: each run's own start-up (the same process or resume on one record) taken off.
        warm = statistics.median(n / (n / rate - start_up[(name, who)]) for rate in rates)
        print(
            f"| {name} ({size:,} B) | {who} | {median:,.0f} | {min(rates):,.0f} | {max(rates):,.0f} | "
            f"{median * size / 1e6:.1f} | {100 * share:.1f} % | {warm:,.0f} |"
        )
    print()
    for name in PROFILES:
        ratios = [m / s for m, s in zip(runs[(name, "mirror")], runs[(name, "site accepts")], strict=True)]
        print(
            f"{name}: mirror / site accepts, per round: median {statistics.median(ratios):.2f}, "
            f"min {min(ratios):.2f}, max {max(ratios):.2f}"
        )
    idle = [kib for phase, kib in footprint.samples if phase == "idle"]
    copy = [kib for phase, kib in footprint.samples if phase == "copy"]
    print(
        f"\nworker RSS: idle median {statistics.median(idle) / 1024:.0f} MB; while copying median "
        f"{statistics.median(copy) / 1024:.0f} MB, max {max(copy) / 1024:.0f} MB; peak (VmHWM) "
        f"{peak_kib / 1024:.0f} MB. Heap in use after a full GC: idle {idle_heap:.0f} MB, after the "
        f"rounds {after_heap:.0f} MB (of {ROLE['connect_heap_mb']} MB)"
    )


if __name__ == "__main__":
    main()
