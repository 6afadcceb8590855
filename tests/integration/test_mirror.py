"""MirrorMaker 2 from a site to a core, as the connect role declares it: two real clusters with
their own CAs, a real Connect worker on the site running the role's configuration, the connectors
from its filter, the site's ACLs from the kafka role and the core's from its per-site filter.

Judged as a user would: the core's copy, read_committed, equals the site's topic record by record
in each partition's order, after a worker killed -9 mid-transfer too; the core holds a site to its
own prefix."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.pikit.cluster.plugins.module_utils import mirror_lag as lag_probe
from ansible_collections.pikit.cluster.plugins.modules import kafka_connectors
from kafka import KafkaProducer
from kafka.errors import KafkaError
from pikit_testkit.connect import OneWorkerSite
from pikit_testkit.mirror import difference, settled, transactions
from pikit_testkit.mirror_pair import Clusters, mirror_pair

from pikit import status

SITE = "greenhouse"
TOPICS = ["sensor-aggregates", "sensor-alerts"]


def _settled(site: dict[str, Any], core: dict[str, Any], topic: str, timeout: float = 90) -> tuple[Any, Any]:
    want, got, _ = settled(site, core, topic, f"{SITE}.{topic}", timeout)
    return want, got


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with mirror_pair(tmp_path_factory.mktemp("mirror"), SITE, dict.fromkeys(TOPICS, 2)) as pair:
        yield pair


def test_the_core_holds_every_committed_record_of_the_site_once_in_order(clusters: Clusters) -> None:
    for topic in TOPICS:
        transactions(clusters.site_admin, topic, "first", 9)
    result = clusters.worker.reconcile(clusters.connectors)
    assert not result.get("failed"), result
    assert sorted(result["created"]) == [f"{SITE}.checkpoints", f"{SITE}.mirror"], result
    for topic in TOPICS:
        want, got = _settled(clusters.site_admin, clusters.core_admin, topic)
        assert sum(map(len, want.values())) == 30, "6 of the 9 transactions committed, 5 records each"
        assert got == want, difference(want, got)
    assert clusters.worker.reconcile(clusters.connectors)["changed"] is False


def test_a_worker_killed_mid_transfer_resumes_and_the_copy_stays_exact(clusters: Clusters) -> None:
    stop = threading.Event()
    writer = threading.Thread(
        target=transactions, args=(clusters.site_admin, TOPICS[0], "during", 10_000, stop)
    )
    writer.start()
    try:
        time.sleep(5)
        clusters.worker.kill()
        time.sleep(3)
        clusters.worker.start()
        time.sleep(5)
    finally:
        stop.set()
        writer.join()
    states = clusters.worker.reconcile(clusters.connectors)["states"]
    assert states[f"{SITE}.mirror"]["tasks"] == ["RUNNING"], states
    want, got = _settled(clusters.site_admin, clusters.core_admin, TOPICS[0], timeout=120)
    assert sum(map(len, want.values())) > 30, "records were written during the kill"
    assert got == want, f"the core's copy after the kill: {difference(want, got)}"


def test_the_core_refuses_a_site_writing_outside_its_prefix(clusters: Clusters) -> None:
    producer = KafkaProducer(**clusters.core_as_site, max_block_ms=10_000, retries=0)
    try:
        with pytest.raises(KafkaError):
            producer.send("school.sensor-aggregates", b"x").get(timeout=15)
        with pytest.raises(KafkaError):
            producer.send("sensor-aggregates", b"x").get(timeout=15)
    finally:
        producer.close(timeout=5)
    assert "school.sensor-aggregates" not in {t for t in _topics(clusters.core_admin)}


def _topics(client: dict[str, Any]) -> set[str]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(**client)
    try:
        return set(consumer.topics())
    finally:
        consumer.close()


def test_the_lag_is_none_when_caught_up_and_grows_while_the_worker_is_away(
    clusters: Clusters, tmp_path: Path
) -> None:
    """The workers' probe (the collection's module_utils/mirror_lag.py) against the real mirror:
    nothing behind once the copy is whole; with the worker gone (no REST API, no copy) the offsets
    it last read stand, and the lag counts what the site committed since, and its age."""
    topic = TOPICS[1]
    config = {
        "rest": clusters.worker.url,
        "connector": f"{SITE}.mirror",
        "site": SITE,
        "core": "core",
        "topics": TOPICS,
        "bootstrap": [clusters.site.address],
        "cafile": str(clusters.worker_tls / "ca.crt"),
        "certfile": str(clusters.worker_tls / "kafka-connect.pem"),
        "state": str(tmp_path / "offsets.json"),
    }
    for name in TOPICS:
        want, got = _settled(clusters.site_admin, clusters.core_admin, name)
        assert got == want, difference(want, got)
    caught_up = lag_probe.measure(config)
    assert caught_up["offsets_age"] == 0
    nothing = {"records": 0, "seconds": 0.0, "lost": 0}
    assert caught_up["topics"] == dict.fromkeys(TOPICS, nothing), caught_up

    clusters.worker.kill()
    try:
        written = time.time()
        transactions(clusters.site_admin, topic, "lag", 6)  # 4 committed, 5 records each
        time.sleep(3)
        behind = lag_probe.measure(config)
    finally:
        clusters.worker.start()
    assert behind["offsets_age"] >= 3, "the offsets read before the worker went"
    assert behind["topics"][TOPICS[0]] == {"records": 0, "seconds": 0.0, "lost": 0}
    assert behind["topics"][topic]["records"] >= 20, behind
    assert time.time() - written >= behind["topics"][topic]["seconds"] >= 3, behind
    text = lag_probe.render(config, behind)
    assert f'pikit_mirror_lag_records{{site="{SITE}",core="core",topic="{topic}"}}' in text

    want, got = _settled(clusters.site_admin, clusters.core_admin, topic, timeout=120)
    assert got == want, difference(want, got)
    healed = lag_probe.measure(config)
    assert healed["topics"][topic] == {"records": 0, "seconds": 0.0, "lost": 0}, healed


def test_pikit_status_shows_the_mirrors_lag_and_names_a_mirror_behind(
    clusters: Clusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    site: Any = OneWorkerSite(clusters.worker.url)
    parts = {part.name: part for part in status.connector_parts(site, clusters.site_admin)}
    mirror = parts[f"{SITE}.mirror"]
    assert mirror.healthy, mirror.problems
    assert mirror.details["core"] == "core"
    assert mirror.details["lag"] == {name: {"records": 0, "seconds": 0.0, "lost": 0} for name in TOPICS}
    assert "lag" not in parts[f"{SITE}.checkpoints"].details

    workers = kafka_connectors.Workers([clusters.worker.url], time.monotonic() + 30)
    workers.call("PUT", f"/connectors/{SITE}.mirror/pause")
    try:
        time.sleep(5)  # the task stops copying
        transactions(clusters.site_admin, TOPICS[0], "paused", 3)
        time.sleep(2)
        monkeypatch.setattr(status, "MIRROR_BEHIND_SECONDS", 1)
        behind = {part.name: part for part in status.connector_parts(site, clusters.site_admin)}[
            f"{SITE}.mirror"
        ]
    finally:
        workers.call("PUT", f"/connectors/{SITE}.mirror/resume")
    assert behind.details["lag"][TOPICS[0]]["records"] >= 10, behind.details
    assert [p for p in behind.problems if "the core's copy is" in p and "behind the site" in p], (
        behind.problems
    )
    want, got = _settled(clusters.site_admin, clusters.core_admin, TOPICS[0], timeout=120)
    assert got == want, difference(want, got)
