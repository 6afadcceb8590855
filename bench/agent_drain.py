"""Drain rate of a full agent spool into an mTLS broker (acks=all), beside kcat and Kafka's own producer.

Every contender is a process of its own, timed from its start to its exit, pinned with
all its threads to core 1 (`taskset -c 1` at exec, which every thread inherits); the
broker's JVM, every thread of it, has core 0 (`taskset -a`). The same N readings go
to the same broker over the same mTLS listener with acks=all, zstd and linger 50 ms:

- the agent's sender draining a pre-filled spool (100 readings per Kafka record);
- kcat with the same 100-reading records (the like-for-like contender);
- Kafka's ProducerPerformance with the same records (`--payload-file`);
- kcat with one reading per message (what a naive bridge would do).

Rounds run the contenders in a rotating order, and the table gives median, min and max.
Each contender's start-up (the same process on one record) is measured too, so the
table shows what share of a run it is.

    .venv/bin/python -m bench.agent_drain [--readings 2000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from edge_agent.config import parse
from edge_agent.kafka_link import KafkaLink
from edge_agent.metrics import Metrics
from edge_agent.sender import Sender
from edge_agent.spool import Record, Spool
from pikit_contract.readings import Reading, envelopes, spool_body
from pikit_testkit.broker import LocalBroker
from pikit_testkit.certs import certificate, new_key, pem

PER_RECORD = 100
PRODUCER_CORE = "1"
BROKER_CORE = "0"
AGENT = "edge agent (100 readings/record)"
KCAT_BATCHED = "kcat (100 readings/record)"
PERF_BATCHED = "Kafka ProducerPerformance (100 readings/record)"
KCAT_SINGLE = "kcat (1 reading/message)"


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


def readings(n: int) -> Iterator[bytes]:
    """Each reading as the agent spools it."""
    now = time.time()
    for i in range(n):
        value = 20.0 + (i % 100) / 10
        yield spool_body(Reading("bench", i, "bme280", "temperature", value, "C", now + i / 100))


class Inputs:
    """The same readings three ways: a spool to copy, one per line, 100 per contract record per line."""

    def __init__(self, work: Path, n: int) -> None:
        self.n = n
        self.spool = work / "spool-template"
        self.single = work / "single.txt"
        self.batched = work / "batched.txt"
        spool = Spool(self.spool, max_bytes=1 << 40, segment_bytes=4 << 20, fsync="never")
        chunk: list[Record] = []
        size = 0
        with self.single.open("wb") as single, self.batched.open("wb") as batched:
            for i, body in enumerate(readings(n)):
                spool.append(i, body)
                single.write(body + b"\n")
                size += len(body)
                chunk.append(Record(i, i, body))
                if len(chunk) == PER_RECORD:
                    batched.writelines(v + b"\n" for v in envelopes("bench", chunk, PER_RECORD))
                    chunk = []
            if chunk:
                batched.writelines(v + b"\n" for v in envelopes("bench", chunk, PER_RECORD))
        spool.close()
        self.reading_bytes = size // n
        self.records = -(-n // PER_RECORD)


def timed(cmd: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(["taskset", "-c", PRODUCER_CORE, *cmd], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def agent_config(work: Path, broker: str, tls: dict[str, Path], spool: Path, topic: str) -> Path:
    path = work / f"{topic}.json"
    path.write_text(
        json.dumps(
            {
                "device_id": "bench",
                "kafka": {
                    "bootstrap_servers": [broker],
                    "topic": topic,
                    "ca_file": str(tls["ca"]),
                    "cert_file": str(tls["bundle"]),
                    "readings_per_record": PER_RECORD,
                },
                "spool": {"directory": str(spool), "fsync": "never"},
                "metrics": {"listen": ""},
                "sensors": [{"type": "system"}],
            }
        )
    )
    return path


def drain(config_file: Path) -> None:
    """The child: the agent's sender, as the agent runs it, until the spool is empty."""
    config = parse(json.loads(config_file.read_text()))
    spool = Spool(Path(config.spool.directory), max_bytes=1 << 40, segment_bytes=4 << 20, fsync="never")
    stop = threading.Event()
    sender = Sender(spool, Metrics(), threading.Event(), KafkaLink(config), config.kafka.readings_per_record)
    thread = threading.Thread(target=sender.run, args=(stop, [float("inf")]))
    thread.start()
    while spool.depth:
        time.sleep(0.01)
    stop.set()
    thread.join()


class Contenders:
    def __init__(self, work: Path, broker: LocalBroker, tls: dict[str, Path], inputs: Inputs) -> None:
        self.work, self.broker, self.tls, self.inputs = work, broker, tls, inputs
        self.runs = 0

    def topic(self) -> str:
        self.runs += 1
        return f"b{self.runs}"

    def agent(self, readings_file: Path | None = None) -> float:
        spool = self.work / "spool"
        shutil.rmtree(spool, ignore_errors=True)
        if readings_file is None:
            shutil.copytree(self.inputs.spool, spool)
        else:
            one = Spool(spool, max_bytes=1 << 30, segment_bytes=4 << 20, fsync="never")
            for i, line in enumerate(readings_file.read_bytes().splitlines()):
                one.append(i, line)
            one.close()
        config = agent_config(self.work, self.broker.address, self.tls, spool, self.topic())
        return timed([sys.executable, "-m", "bench.agent_drain", "--drain", str(config)])

    def kcat(self, lines: Path) -> float:
        options = {
            "security.protocol": "ssl",
            "ssl.ca.location": self.tls["ca"],
            "ssl.certificate.location": self.tls["cert"],
            "ssl.key.location": self.tls["key"],
            "acks": "all",
            "enable.idempotence": "true",
            "linger.ms": "50",
            "compression.codec": "zstd",
        }
        argv = ["kcat", "-P", "-b", self.broker.address, "-t", self.topic(), "-l", str(lines)]
        for name, value in options.items():
            argv += ["-X", f"{name}={value}"]
        return timed(argv)

    def producer_performance(self, payloads: Path, records: int) -> float:
        tls = self.tls
        props = [
            f"bootstrap.servers={self.broker.address}",
            "acks=all",
            "enable.idempotence=true",
            "security.protocol=SSL",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={tls['bundle']}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={tls['ca']}",
            "linger.ms=50",
            "compression.type=zstd",
            "batch.size=262144",
        ]
        # ProducerPerformance holds the whole payload file in its heap (about 2 bytes a character).
        tool = "org.apache.kafka.tools.ProducerPerformance"
        run = ["--topic", self.topic(), "--num-records", str(records), "--payload-file", str(payloads)]
        java = ["java", "-Xmx3g", "-cp", f"{self.broker.home}/libs/*", tool]
        return timed([*java, *run, "--throughput", "-1", "--producer-props", *props])

    def full(self) -> dict[str, Callable[[], float]]:
        i = self.inputs
        return {
            AGENT: self.agent,
            KCAT_BATCHED: lambda: self.kcat(i.batched),
            PERF_BATCHED: lambda: self.producer_performance(i.batched, i.records),
            KCAT_SINGLE: lambda: self.kcat(i.single),
        }

    def start_up(self) -> dict[str, float]:
        """Each contender on one record of 100 readings: its cost before the first useful send."""
        one_batch = self.work / "one-batch.txt"
        one_batch.write_bytes(self.inputs.batched.open("rb").readline())
        hundred = self.work / "hundred.txt"
        with self.inputs.single.open("rb") as single:
            hundred.write_bytes(b"".join(single.readline() for _ in range(PER_RECORD)))
        return {
            AGENT: self.agent(hundred),
            KCAT_BATCHED: self.kcat(one_batch),
            PERF_BATCHED: self.producer_performance(one_batch, 1),
            KCAT_SINGLE: self.kcat(hundred),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readings", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drain", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drain:
        drain(args.drain)
        return
    n = args.readings
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tls = make_tls(work)
        inputs = Inputs(work, n)
        broker = LocalBroker(work / "kafka", tls=(tls["bundle"], tls["ca"]))
        broker.start()
        assert broker.proc is not None
        subprocess.run(
            ["taskset", "-a", "-p", "-c", BROKER_CORE, str(broker.proc.pid)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        try:
            contenders = Contenders(work, broker, tls, inputs)
            start_up = contenders.start_up()
            runs = contenders.full()
            elapsed: dict[str, list[float]] = {name: [] for name in runs}
            ratios: list[float] = []
            names = list(runs)
            for r in range(args.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    elapsed[name].append(runs[name]())
                    print(f"round {r + 1}: {name}: {n / elapsed[name][-1]:,.0f} readings/s", flush=True)
                ratios.append(elapsed[KCAT_BATCHED][-1] / elapsed[AGENT][-1])
        finally:
            broker.stop()
    report(n, inputs.reading_bytes, args.rounds, elapsed, start_up, ratios)


def report(
    n: int,
    size: int,
    rounds: int,
    elapsed: dict[str, list[float]],
    start_up: dict[str, float],
    ratios: list[float],
) -> None:
    like = statistics.median(n / t for t in elapsed[KCAT_BATCHED])
    print(
        f"\n{n:,} readings of {size} bytes, mTLS, acks=all, zstd, linger 50 ms; every producer process "
        f"on core {PRODUCER_CORE}, the broker on core {BROKER_CORE}; {rounds} rounds, timed from process "
        "start to exit\n"
    )
    # "Warm" takes each contender's own start-up (one record, same process) off every run:
    # the same correction for all, for those whose start-up stays above 5 % of a run.
    warm_like = statistics.median(n / (t - start_up[KCAT_BATCHED]) for t in elapsed[KCAT_BATCHED])
    print(
        "| producer | median readings/s | min | max | vs kcat (100/record) | start-up share "
        "| warm median | warm vs kcat |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, times in elapsed.items():
        rates = [n / t for t in times]
        median = statistics.median(rates)
        share = start_up[name] / statistics.median(times)
        warm = statistics.median(n / (t - start_up[name]) for t in times)
        print(
            f"| {name} | {median:,.0f} | {min(rates):,.0f} | {max(rates):,.0f} | {median / like:.2f} "
            f"| {100 * share:.1f} % | {warm:,.0f} | {warm / warm_like:.2f} |"
        )
    print(
        f"\nagent / kcat (100 readings/record), per round: median {statistics.median(ratios):.2f}, "
        f"min {min(ratios):.2f}, max {max(ratios):.2f}"
    )


if __name__ == "__main__":
    main()
