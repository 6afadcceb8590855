"""The Spark driver's transactional client, chosen on evidence (issue 31): kafka-python behind the
sink's bounded wrappers (spark_apps/pikit_spark/sink.py), or confluent-kafka (librdkafka), whose
transactional calls each take a timeout.

Both write the same batches through the same `TransactionalSink.write` loop: the records, the
batch's marker offset in the transaction, the commit; every call bounded at 5 s; a failed
attempt drops its producer, the next one's `init_transactions` fences it and aborts what it left
open, and the batch is sent again. Only the producer differs. Each contender meets, in turn:

- frozen: the broker is stopped (SIGSTOP) as the batch's commit goes out, and thawed 20 s later;
- killed: the sink holds before its commit, the broker dies meanwhile (SIGKILL) and is started
  again 30 s later.

Per run: how long the write took after the broker was back (a call that ignores its bound keeps
the writer past it), and the topic read back (read_committed): every batch once, or the run
fails. Runs alternate the contenders.

    make bench-txclients        # or: .venv/bin/python -m bench.txclient_trial --rounds 3
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pikit_contract.failpoints import SINK_BEFORE_COMMIT
from pikit_spark.sink import Change, Record, SourceOffsets, TransactionalSink
from pikit_testkit.broker import LocalBroker, new_topic

from pikit.topic import read_to_end

CALL_TIMEOUT = 5.0
FREEZE_S = 20.0
OUTAGE_S = 30.0


class ConfluentSink(TransactionalSink):
    """The same sink on confluent-kafka's transactional producer: each call takes its bound."""

    def producer(self) -> Any:
        from confluent_kafka import Consumer, Producer

        if self._producer is None:
            servers = ",".join(self.client["bootstrap_servers"])
            producer = Producer(
                {
                    "bootstrap.servers": servers,
                    "transactional.id": self.transactional_id,
                    "acks": "all",
                    "linger.ms": 20,
                    "compression.type": "gzip",
                    "message.timeout.ms": self.delivery_timeout_ms,
                    "transaction.timeout.ms": 60_000,
                }
            )
            producer.init_transactions(self.call_timeout)
            self._group_metadata = Consumer(
                {"bootstrap.servers": servers, "group.id": self.group}
            ).consumer_group_metadata()
            self._last_batch = self._checked_marker()
            self._producer = producer
        return self._producer

    def _write_once(
        self, batch_id: int, records: list[tuple[str, Change]], source: SourceOffsets | None = None
    ) -> int | None:
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as Partition

        assert source is None, "the trial compares the clients on the batch-id marker"
        producer = self.producer()
        if batch_id <= self._last_batch:
            return None
        failed: list[Any] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failed.append(error)

        producer.begin_transaction()
        for topic, (key, value, headers) in records:
            producer.produce(topic, key=key, value=value, headers=headers, on_delivery=delivered)
        if producer.flush(self.delivery_timeout_ms / 1000 + 5) or failed:
            raise KafkaException(failed[0] if failed else "records not delivered in time")
        self._failpoint(SINK_BEFORE_COMMIT)
        marker = Partition(self.marker.topic, self.marker.partition, batch_id + 1, metadata=self.lineage)
        producer.send_offsets_to_transaction([marker], self._group_metadata, self.call_timeout)
        producer.commit_transaction(self.call_timeout)
        self._last_batch = batch_id
        return len(records)

    def close(self, timeout: float = 10) -> None:
        if self._producer is not None:
            self._producer.purge()
            self._producer = None


CONTENDERS: dict[str, type[TransactionalSink]] = {
    "kafka-python (bounded wrappers)": TransactionalSink,
    "confluent-kafka": ConfluentSink,
}


def _batch(batch_id: int) -> list[Record]:
    return [(f"dev-{i % 2}".encode(), f"{batch_id}:{i}".encode(), [("reason", b"why")]) for i in range(3)]


def run_once(kind: type[TransactionalSink], broker: LocalBroker, fault: str) -> dict[str, float]:
    """One write of batch 1 with the fault at its commit; the seconds it took after the broker's return."""
    topic = new_topic(broker.address, "trial")
    client: dict[str, Any] = {"bootstrap_servers": [broker.address]}
    name = f"trial-{uuid.uuid4().hex[:6]}"
    back: list[float] = []
    armed: list[bool] = []  # set once batch 0 is in: the fault lands on batch 1's commit only

    def at_commit(self: TransactionalSink, point: str) -> None:
        if point != SINK_BEFORE_COMMIT or not armed or broker.proc is None:
            return
        armed.clear()
        if fault == "frozen":
            pid = broker.proc.pid
            os.kill(pid, signal.SIGSTOP)
            threading.Timer(FREEZE_S, thaw, args=(pid,)).start()
        else:
            threading.Thread(target=outage).start()
            time.sleep(3)  # held before the commit while the broker dies

    def outage() -> None:
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGKILL)
        broker.proc.wait()
        broker.proc = None
        time.sleep(OUTAGE_S)
        broker.start()
        back.append(time.monotonic())

    def thaw(pid: int) -> None:
        os.kill(pid, signal.SIGCONT)
        back.append(time.monotonic())

    trial = type(f"Trial{kind.__name__}", (kind,), {"_failpoint": at_commit})
    bounds: dict[str, Any] = {"retry_for": 300, "delivery_timeout_ms": 10_000, "call_timeout": CALL_TIMEOUT}
    sink = trial([topic], name, client, failpoints="unused", **bounds)
    # None: a first attempt timed out at the client after its commit landed, and the retry found it.
    assert sink.write(0, {topic: _batch(0)}) in (3, None)
    armed.append(True)
    started = time.monotonic()
    result = sink.write(1, {topic: _batch(1)})
    done = time.monotonic()
    sink.close()
    deadline = time.monotonic() + 120
    while not back and time.monotonic() < deadline:
        time.sleep(0.2)
    values = sorted(r.value for r in read_to_end(topic, **client))
    expected = sorted(f"{b}:{i}".encode() for b in range(2) for i in range(3))
    if values != expected or result not in (3, None):
        raise AssertionError(
            f"{kind.__name__} {fault}: wrote {values} (result {result}), not each batch once"
        )
    return {"after_return": done - back[0], "write": done - started}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as work:
        broker = LocalBroker(Path(work))
        broker.start()
        try:
            for round_ in range(args.rounds):
                order = list(CONTENDERS.items())[:: 1 if round_ % 2 == 0 else -1]
                for fault in ("frozen", "killed"):
                    for label, kind in order:
                        run = run_once(kind, broker, fault)
                        results.setdefault((label, fault), []).append(run)
                        print(f"round {round_ + 1} {fault:6} {label}: {_fmt(run)}", flush=True)
        finally:
            if broker.proc is not None:
                broker.stop()
    print(f"\n{args.rounds} rounds; seconds from the broker's return until the batch was in Kafka once:")
    print("| fault | client | median | min | max |\n|---|---|---:|---:|---:|")
    for (label, fault), runs in sorted(results.items(), key=lambda item: (item[0][1], item[0][0])):
        after = [r["after_return"] for r in runs]
        print(f"| {fault} | {label} | {statistics.median(after):.1f} | {min(after):.1f} | {max(after):.1f} |")


def _fmt(run: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}s" for k, v in run.items())


if __name__ == "__main__":
    main()
