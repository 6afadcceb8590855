"""Judging a site's mirror on its core as a user would: the core's copy, read_committed, against
the site's topic, record by record in each partition's order (tests/integration/test_mirror.py,
roles/connect/molecule/mirror)."""

from __future__ import annotations

import threading
import time
from typing import Any

from kafka import KafkaProducer

from pikit.topic import read_to_end

Records = dict[int, list[tuple[bytes | None, bytes]]]


def records(topic: str, client: dict[str, Any], timeout: float = 60.0) -> Records:
    """Each partition's committed records, in order."""
    out: Records = {}
    for record in sorted(read_to_end(topic, timeout, **client), key=lambda r: (r.partition, r.offset)):
        out.setdefault(record.partition, []).append((record.key, record.value))
    return out


def difference(want: Records, got: Records) -> str:
    """Where the core's copy departs from the site's, per partition: counts, duplicates, the first
    record that differs."""
    out = []
    for partition in sorted(set(want) | set(got)):
        w, g = want.get(partition, []), got.get(partition, [])
        first = next((i for i, (a, b) in enumerate(zip(w, g, strict=False)) if a != b), min(len(w), len(g)))
        out.append(
            f"partition {partition}: site {len(w)}, core {len(g)} ({len(g) - len(set(g))} repeated), "
            f"first difference at {first}: site {w[first : first + 2]} core {g[first : first + 2]}"
        )
    return "; ".join(out)


def settled(
    site: dict[str, Any], core: dict[str, Any], topic: str, copy: str, timeout: float = 90
) -> tuple[Records, Records, float]:
    """The site's topic, the core's copy of it, and the seconds it took until they were equal (or
    the timeout passed)."""
    started = time.monotonic()
    while True:
        want, got = records(topic, site), records(copy, core)
        if want == got or time.monotonic() - started > timeout:
            return want, got, time.monotonic() - started
        time.sleep(1)


def expected_copy(reference: Records, got: Records, later: Records) -> tuple[Records, bool]:
    """What the core's copy `got` must equal when the site goes on writing, and whether it holds
    at least the site's `reference` (read before it). The copy must be the site's records read
    after it (`later`), from each partition's start, as many as the copy holds and at least the
    reference's: a repeat, a loss or a record the site never committed makes them differ."""
    reached = all(len(got.get(p, [])) >= len(want) for p, want in reference.items())
    expected = {}
    for partition, on_site in later.items():
        length = max(len(got.get(partition, [])), len(reference.get(partition, [])))
        if on_site[:length]:
            expected[partition] = on_site[:length]
    return expected, reached


def caught_up(
    site: dict[str, Any], core: dict[str, Any], topic: str, copy: str, timeout: float = 90
) -> tuple[Records, Records, float]:
    """settled() for a topic the site still writes (an agent producing): the site's records up to
    where the core's copy reached, the copy, and the seconds until it held everything the site had
    when this began (or the timeout passed)."""
    started = time.monotonic()
    reference = records(topic, site)
    while True:
        got = records(copy, core)
        expected, reached = expected_copy(reference, got, records(topic, site))
        if reached or time.monotonic() - started > timeout:
            return expected, got, time.monotonic() - started
        time.sleep(1)


def transactions(
    client: dict[str, Any], topic: str, tag: str, count: int, stop: threading.Event | None = None
) -> int:
    """Up to `count` transactions of 5 records each into `topic`, every third aborted, until `stop`;
    the number of transactions made."""
    producer = KafkaProducer(**client, transactional_id=f"test-{tag}", acks="all")
    producer.init_transactions()
    made = 0
    for n in range(count):
        if stop is not None and stop.is_set():
            break
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, key=f"dev-{i}".encode(), value=f"{tag}-{n}-{i}".encode())
        if n % 3 == 2:
            producer.abort_transaction()
        else:
            producer.commit_transaction()
        made += 1
        time.sleep(0.05)
    producer.close()
    return made
