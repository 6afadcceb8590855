"""The whole pipeline on the lab: which reading rate Spark sustains, and how long a reading takes
to show up in its window's aggregate.

Needs the demo's lab, converged (`make demo`). Synthetic devices `bench-0..9` produce contract
batches (100 readings per record, mTLS, acks=all) at a fixed rate per step, and one record in
DEAD_EVERY that is not JSON; the aggregates topic is watched for their windows and the dead-letter
topic for those records. A step is sustained when every query's consumer lag (the readings topic's
end offsets minus the offsets of the newest committed micro-batch in the query's checkpoint on the
lab's shared volume, sampled every 5 s) does not grow over the step: its least-squares slope after
the first third of the step stays under 5 % of the accepted rate. The queries are
sensor_aggregates (windows, late readings and dead letters) and anomaly_alerts. Latency is, per
reading, the moment its window's aggregate arrived minus the moment the reading was taken.

A step of `max` offers what the brokers accept: the producer sends as fast as its acks=all
allow, on the same machine as the lab. Every step reports the readings/s the brokers accepted
(the last acknowledged, from the first send) and, per query, the records it committed while the
step ran over the records the brokers accepted: "does the query keep up with what the cluster
takes in?", whatever this machine's producer can offer.

    make bench-pipeline      (or: PATH=.venv/bin:$PATH .venv/bin/python -m bench.pipeline --rates ...)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from pikit_contract import signing
from pikit_contract.readings import Reading, encode_batch

from bench import lab as lab_
from bench.cpu import CpuMeter

DEVICES = [f"bench-{i}" for i in range(10)]
PER_RECORD = 100
DEAD_EVERY = 500
WINDOW_S = 60
NOT_JSON = b"bench: not json "
# Readings handed to the producer per turn when it goes as fast as it can (its batching still applies).
FLOOD_CHUNK = 20 * PER_RECORD
# Each streaming query's checkpoint, under the lab's shared checkpoints directory.
QUERIES = {"sensor_aggregates": "sensor_aggregates/stream", "anomaly_alerts": "anomaly_alerts/readings"}


class Watch(threading.Thread):
    """Arrival time of every bench window in the aggregates topic; the bench's dead letters."""

    def __init__(self, lab: lab_.Lab) -> None:
        super().__init__(daemon=True)
        self.dead_letters = lab.topics["dead_letter"]
        self.consumer = lab.committed(lab.topics["aggregates"], self.dead_letters)
        self.arrived: dict[tuple[str, int], float] = {}
        self.dead: set[bytes] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for batch in self.consumer.poll(timeout_ms=500).values():
                now = time.time()
                for record in batch:
                    if record.topic == self.dead_letters:
                        if record.value.startswith(NOT_JSON):
                            self.dead.add(record.value)
                        continue
                    doc = json.loads(record.value)
                    if doc["device"].startswith("bench-"):
                        self.arrived.setdefault((doc["device"], int(doc["window_start"])), now)


class SparkLag:
    """Records of the readings topic that a streaming query has not yet processed."""

    def __init__(self, lab: lab_.Lab, checkpoint: str) -> None:
        self.offsets = lab.scratch_of(lab.driver_of(checkpoint), checkpoint) / "offsets"
        self.consumer = KafkaConsumer(**lab.client)
        self.topic = lab.topics["readings"]

    def processed(self) -> dict[int, int]:
        """End offsets of the newest batch Spark committed (offsets/N is written when batch N is
        planned, commits/N when it is done: a long batch in progress still counts as lag)."""
        commits = self.offsets.parent / "commits"
        newest = max((int(p.name) for p in commits.iterdir() if p.name.isdigit()), default=None)
        if newest is None:
            return {}
        source = json.loads((self.offsets / str(newest)).read_text().splitlines()[2])
        return {int(part): int(off) for part, off in source[self.topic].items()}

    def records(self) -> int:
        topic = self.topic
        parts = [TopicPartition(topic, p) for p in self.consumer.partitions_for_topic(topic) or ()]
        ends = self.consumer.end_offsets(parts)
        processed = self.processed()
        return sum(end - processed.get(tp.partition, 0) for tp, end in ends.items())

    def committed(self) -> int:
        """Offsets of the readings topic up to the newest batch the query committed, summed."""
        return sum(self.processed().values())

    def sample(self, samples: list[tuple[float, int]], done: threading.Event, every: float = 5.0) -> None:
        while True:
            samples.append((time.monotonic(), self.records()))
            if done.wait(every):
                samples.append((time.monotonic(), self.records()))
                return


def lag_growth(samples: list[tuple[float, int]], skip: float) -> float:
    """Least-squares slope of the lag (records/s) after the first `skip` seconds of a step."""
    t0 = samples[0][0]
    points = [(t - t0, n) for t, n in samples if t - t0 >= skip] or [(t - t0, n) for t, n in samples]
    if len(points) < 2:
        return 0.0
    mean_t = statistics.fmean(t for t, _ in points)
    mean_n = statistics.fmean(n for _, n in points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (n - mean_n) for t, n in points) / spread if spread else 0.0


def produce(
    client: dict[str, Any],
    topic: str,
    keys: dict[str, bytes],
    rate: int,
    seconds: float,
    taken: dict[tuple[str, int], list[float]],
) -> tuple[int, int, float]:
    """Readings sent at `rate` (0: as fast as the brokers accept them) for `seconds`, the records
    that were not JSON among them, and the seconds until the last was acknowledged."""
    producer = KafkaProducer(
        **client, acks="all", linger_ms=20, batch_size=256 * 1024, compression_type="zstd"
    )

    def send(device: str, value: bytes) -> None:
        producer.send(
            topic, key=device.encode(), value=value, headers=signing.headers(device, keys[device], value)
        )

    seqs = dict.fromkeys(DEVICES, int(time.time() * 1000))
    rng = random.Random(1)
    sent, dead, started = 0, 0, time.monotonic()
    while time.monotonic() - started < seconds:
        due = int(rate * (time.monotonic() - started)) - sent if rate else FLOOD_CHUNK
        for _ in range(max(0, due) // PER_RECORD):
            device = rng.choice(DEVICES)
            if rng.randrange(DEAD_EVERY) == 0:
                send(device, NOT_JSON + f"{rate} {dead}".encode())
                dead += 1
            now = time.time()
            readings = []
            for _ in range(PER_RECORD):
                seqs[device] += 1
                readings.append(Reading(device, seqs[device], "bench", "value", rng.gauss(20, 2), "C", now))
            send(device, encode_batch(device, readings))
            taken[(device, int(now // 60 * 60))].extend([now] * PER_RECORD)
            sent += PER_RECORD
        if rate:
            time.sleep(0.01)
    producer.flush()
    elapsed = time.monotonic() - started
    producer.close()
    return sent, dead, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rates",
        default="6000,15000,30000,60000",
        help="readings/s per step; `max`: as fast as the brokers accept the bench's producer",
    )
    parser.add_argument("--seconds", type=float, default=150, help="length of each step")
    parser.add_argument("--settle", type=float, default=150, help="wait after the last step for its windows")
    parser.add_argument(
        "--drain", type=float, default=300, help="at most this long for Spark to catch up between steps"
    )
    args = parser.parse_args()
    lab = lab_.find()
    client = lab.client
    # The lab registers these devices (pikit_device_signing_extra): they sign as agents do.
    keys = lab.device_keys(DEVICES)
    watch = Watch(lab)
    watch.start()
    lags = {name: SparkLag(lab, checkpoint) for name, checkpoint in QUERIES.items()}
    results = []
    for rate in (0 if r == "max" else int(r) for r in args.rates.split(",")):
        taken: dict[tuple[str, int], list[float]] = defaultdict(list)
        samples: dict[str, list[tuple[float, int]]] = {name: [] for name in lags}
        done = threading.Event()
        samplers = [
            threading.Thread(target=lag.sample, args=(samples[name], done), daemon=True)
            for name, lag in lags.items()
        ]
        for sampler in samplers:
            sampler.start()
        committed = {name: lag.committed() for name, lag in lags.items()}
        cpu = CpuMeter()
        sent, dead, elapsed = produce(client, lab.topics["readings"], keys, rate, args.seconds, taken)
        cpu_share = cpu.share()
        committed = {name: lag.committed() - committed[name] for name, lag in lags.items()}
        done.set()
        for sampler in samplers:
            sampler.join()
        growth = {name: lag_growth(s, skip=args.seconds / 3) * PER_RECORD for name, s in samples.items()}
        results.append(Step(rate, sent, dead, elapsed, committed, samples, growth, taken))
        print(
            f"step {rate or 'max'}/s: sent {sent} in {elapsed:.0f} s, "
            f"accepted {results[-1].accepted:,.0f}/s, "
            + "; ".join(f"{name} committed {results[-1].ratio(name):.2f}x accepted" for name in lags)
            + "; "
            + "; ".join(
                f"{name} lag {s[0][1]} -> {s[-1][1]} records, growing by {growth[name]:.0f} readings/s"
                for name, s in samples.items()
            )
            + f"; {cpu_share.said()}",
            flush=True,
        )
        # Let Spark catch up before the next step: back within two triggers' worth of records.
        drain_until = time.monotonic() + args.drain
        while (
            max(lag.records() for lag in lags.values()) > 2 * results[-1].accepted * 10 // PER_RECORD
            and time.monotonic() < drain_until
        ):
            time.sleep(5)
    time.sleep(args.settle)
    watch.stop.set()
    report(args.seconds, results, watch)


@dataclass
class Step:
    rate: int  # offered readings/s; 0: as fast as the brokers accept them
    sent: int
    dead: int  # records that were not JSON
    elapsed: float  # from the first send to the last acknowledgement
    committed: dict[str, int]  # records each query committed (its checkpoint) while the step ran
    samples: dict[str, list[tuple[float, int]]]
    growth: dict[str, float]
    taken: dict[tuple[str, int], list[float]]

    @property
    def accepted(self) -> float:
        """Readings/s the brokers acknowledged (acks=all) from the bench's producer."""
        return self.sent / self.elapsed

    def ratio(self, query: str) -> float:
        """The query's committed records over the step against the records the brokers accepted
        (the lab's agents' few records count for the query, not for the brokers)."""
        return self.committed[query] / (self.sent // PER_RECORD + self.dead)


def quantiles(values: list[float]) -> tuple[str, str]:
    if len(values) < 2:
        return "-", "-"
    cuts = statistics.quantiles(values, n=100)
    return f"{cuts[49]:.0f} s", f"{cuts[98]:.0f} s"


def report(seconds: float, results: list[Step], watch: Watch) -> None:
    names = list(QUERIES)
    print(
        f"\nLab pipeline, {seconds:.0f} s per step (window 1 min, the inventory's per-device slack, "
        "trigger 10 s)\n"
    )
    print(
        "| offered readings/s | sent | brokers accepted readings/s | "
        + " | ".join(f"{n}: committed / accepted" for n in names)
        + " | "
        + " | ".join(f"{n}: lag median (records), growth (readings/s)" for n in names)
        + " | sustained by every query | windows in | dead letters in | after window end p50 | p99 "
        "| reading to aggregate p50 | p99 |"
    )
    print("|---:|---:|---:|" + "---:|" * 2 * len(names) + ":---:|---:|---:|---:|---:|---:|---:|")
    for step in results:
        arrived = watch.arrived
        per_reading = [arrived[k] - ts for k, stamps in step.taken.items() if k in arrived for ts in stamps]
        # A window ends WINDOW_S after its start; the wait for that end is the window's, not the pipeline's.
        after_end = [arrived[k] - (k[1] + WINDOW_S) for k in step.taken if k in arrived]
        emitted = sum(1 for key in step.taken if key in arrived)
        dead_in = sum(1 for v in watch.dead if v.startswith(NOT_JSON + f"{step.rate} ".encode()))
        # Lag that grows by less than 5 % of the offered rate is noise of the micro-batch cycle.
        kept_up = all(g < 0.05 * step.accepted for g in step.growth.values())
        ratios = " | ".join(f"{step.ratio(q):.2f}" for q in names)
        lags = " | ".join(
            f"{statistics.median(n for _, n in step.samples[q]):,.0f}, {step.growth[q]:,.0f}" for q in names
        )
        print(
            f"| {f'{step.rate:,}' if step.rate else 'max'} | {step.sent:,} | {step.accepted:,.0f} "
            f"| {ratios} | {lags} "
            f"| {'yes' if kept_up else 'no'} "
            f"| {emitted}/{len(step.taken)} | {dead_in}/{step.dead} | {' | '.join(quantiles(after_end))} "
            f"| {' | '.join(quantiles(per_reading))} |"
        )


if __name__ == "__main__":
    main()
