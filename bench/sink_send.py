"""The sink's Kafka transaction for one large micro-batch: the driver's cost of sending it.

A catch-up batch of sensor_aggregates sends 16,800 records (16,700 windows to the aggregates
topic, 100 to the latest), and at 10,000 devices the batch that closes the minute's windows
about as many; its `kafka` step took 3.0-3.3 s on the lab. Here the apps' own
`TransactionalSink.write` (acks all, gzip, linger 20 ms, the marker offset, the commit) sends the
same kind of records, built by the app's own `as_kafka_records`/`as_latest_records` from closed
windows, to one local KRaft broker (plaintext, from the artifact cache), per producer batch size,
side by side: the contenders take turns, their order reversed every other round. Each write is
timed from the first send to the commit's return, and the topic is read back (read_committed):
every record once, or the run fails.

    .venv/bin/python -m bench.sink_send [--records 16800] [--rounds 5] [--partitions 6]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pikit_spark.aggregates import as_kafka_records, as_latest_records
from pikit_spark.sink import Record, TransactionalSink
from pikit_testkit.broker import LocalBroker, new_topic

from pikit.topic import read_to_end

KIB = 1024
# name -> the producer's batch_size (kafka-python's default is 16 KiB)
CONTENDERS = {
    "16 KiB batches (kafka-python's default)": 16 * KIB,
    "256 KiB batches (the sink's BATCH_BYTES)": 256 * KIB,
    "1 MiB batches": 1024 * KIB,
}
METRICS = (("bme280", "temperature", "C"), ("bme280", "humidity", "%"), ("bme280", "pressure", "hPa"))


def closed_windows(count: int, devices: int = 100) -> list[dict[str, Any]]:
    """`count` closed one-minute windows of `devices` devices, as device_windows.fold makes them."""
    start = 1_795_000_000
    windows = []
    for i in range(count):
        sensor, metric, unit = METRICS[i % len(METRICS)]
        minute = i // (devices * len(METRICS))
        windows.append(
            {
                "device": f"bench-{i % devices}",
                "sensor": sensor,
                "metric": metric,
                "unit": unit,
                "window_start": start + 60 * minute,
                "window_end": start + 60 * (minute + 1),
                "count": 60,
                "min": 20.0 + i % 7,
                "max": 24.5 + i % 5,
                "mean": 22.123456789 + i % 3,
                "stddev": 0.987654321,
            }
        )
    return windows


READ_BACK_S = 30.0  # how long the written batch may take to be readable whole


class Sized(TransactionalSink):
    """The apps' sink with its producer's batch size set apart."""

    def __init__(self, batch_size: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch_size = batch_size

    def producer_options(self) -> dict[str, Any]:
        return {**super().producer_options(), "batch_size": self.batch_size}


def write_once(
    broker: LocalBroker, batch_size: int, outputs: dict[str, list[Record]], partitions: int
) -> float:
    topics = {name: new_topic(broker.address, name, partitions) for name in outputs}
    client: dict[str, Any] = {"bootstrap_servers": [broker.address]}
    sink = Sized(batch_size, list(topics.values()), f"bench-{uuid.uuid4().hex[:6]}", client)
    try:
        sink.producer()  # init_transactions and the marker's read: not part of a batch's send
        started = time.perf_counter()
        written = sink.write(0, {topics[name]: records for name, records in outputs.items()})
        seconds = time.perf_counter() - started
    finally:
        sink.close()
    for name, records in outputs.items():
        wanted = sorted(value for _, value, _ in records)
        # A commit returns once the coordinator logged it; the markers that make its records
        # readable (read_committed) reach the partitions after that: on a busy machine a read
        # right after the commit came back short.
        deadline = time.monotonic() + READ_BACK_S
        while (back := sorted(r.value for r in read_to_end(topics[name], **client))) != wanted:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if back != wanted or written != sum(map(len, outputs.values())):
            raise AssertionError(f"{name}: {len(back)} records read back of {len(records)} written")
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=16_700, help="closed windows in the batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6, help="of each output topic (the lab's)")
    args = parser.parse_args(argv)
    windows = closed_windows(args.records)
    outputs = {"aggregates": as_kafka_records(windows), "latest": as_latest_records(windows)}
    total = sum(map(len, outputs.values()))
    print(f"{total:,} records a batch ({', '.join(f'{len(r):,} {n}' for n, r in outputs.items())})")
    results: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory() as work:
        broker = LocalBroker(Path(work))
        broker.start()
        try:
            write_once(broker, CONTENDERS[next(iter(CONTENDERS))], outputs, args.partitions)  # warm-up
            for round_ in range(args.rounds):
                order = list(CONTENDERS)[:: 1 if round_ % 2 == 0 else -1]
                for name in order:
                    seconds = write_once(broker, CONTENDERS[name], outputs, args.partitions)
                    results[name].append(seconds)
                    print(f"round {round_ + 1} {name}: {seconds:.2f} s", flush=True)
        finally:
            broker.stop()
    first = statistics.median(results[next(iter(CONTENDERS))])
    print(
        f"\n{args.rounds} rounds, {total:,} records in one transaction, {args.partitions} partitions a topic:"
    )
    print("| producer batch size | median | min | max | records/s (median) | vs 16 KiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        median = statistics.median(runs)
        print(
            f"| {name} | {median:.2f} s | {min(runs):.2f} s | {max(runs):.2f} s | {total / median:,.0f} "
            f"| {median / first:.2f} |"
        )


if __name__ == "__main__":
    main()
