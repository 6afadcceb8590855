"""The kafka role's disk guard arithmetic (filter_plugins/kafka_disk.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.conftest import load_filter_plugin

disk = load_filter_plugin("kafka", "kafka_disk")
GIB = 2**30
MIB = 2**20


def topic(name: str, partitions: int, rf: int = 3, **extra: object) -> dict[str, Any]:
    return {"name": name, "partitions": partitions, "replication_factor": rf, **extra}


PIPELINE = [
    topic("sensor-readings", 6, config={"retention.ms": 604800000}, disk_weight=8),
    topic("sensor-aggregates", 3),
    topic("sensor-alerts", 3),
    topic("sensor-dead-letters", 1),
    topic("sensor-late", 1),
]


def on_disk(plan: dict[str, dict[str, str]], topics: list[dict[str, Any]], brokers: int) -> int:
    """The most one broker's partitions can hold under the plan: retention plus one segment each."""
    total = 0
    for t in topics:
        config = {**plan.get(t["name"], {}), **(t.get("config") or {})}
        per_partition = int(config["retention.bytes"]) + int(config["segment.bytes"])
        total += per_partition * math.ceil(int(t["partitions"]) * int(t["replication_factor"]) / brokers)
    return total


def test_a_32_gb_card_on_three_pis_keeps_every_broker_under_its_share() -> None:
    sizes = {"pi-1": 29 * GIB, "pi-2": 31 * GIB, "pi-3": 30 * GIB}
    plan = disk.kafka_disk_plan(PIPELINE, sizes, 0.5, 3, 256 * MIB)
    assert set(plan) == {t["name"] for t in PIPELINE}
    assert on_disk(plan, PIPELINE, 3) <= 29 * GIB * 0.5  # the smallest card decides
    readings, aggregates = plan["sensor-readings"], plan["sensor-aggregates"]
    # weight 8 per partition: each readings partition gets 8 times an aggregates partition's part
    per = {name: int(p["retention.bytes"]) + int(p["segment.bytes"]) for name, p in plan.items()}
    assert per["sensor-readings"] == pytest.approx(8 * per["sensor-aggregates"], rel=1e-6)
    assert readings["segment.bytes"] == str(256 * MIB)  # large enough for the broker default
    assert int(aggregates["segment.bytes"]) < 256 * MIB  # small part, smaller segments
    assert int(aggregates["segment.bytes"]) % MIB == 0


def test_segments_shrink_so_that_a_small_part_keeps_four_of_them() -> None:
    plan = disk.kafka_disk_plan([topic("t", 1, 1)], {"b": 100 * MIB}, 0.5, 1, 256 * MIB)
    assert plan["t"] == {"segment.bytes": str(12 * MIB), "retention.bytes": str(50 * MIB - 12 * MIB)}


def test_a_topic_that_sets_its_own_retention_is_kept_and_reserved_first() -> None:
    own = topic("own", 2, 1, config={"retention.bytes": 10 * MIB, "segment.bytes": 2 * MIB})
    plan = disk.kafka_disk_plan([own, topic("rest", 2, 1)], {"b": 100 * MIB}, 0.5, 1, 256 * MIB)
    assert "own" not in plan
    rest = int(plan["rest"]["retention.bytes"]) + int(plan["rest"]["segment.bytes"])
    assert rest == (50 * MIB - 2 * 12 * MIB) // 2


def test_what_cannot_fit_is_refused_naming_the_topic_the_host_and_the_variable() -> None:
    with pytest.raises(disk.DiskPlanError) as refused:
        disk.kafka_disk_plan(PIPELINE, {"pi-1": 8 * GIB, "pi-2": 16 * MIB}, 0.5, 2, 256 * MIB)
    message = str(refused.value)
    assert "topic sensor-readings" in message
    assert "on pi-2, whose data disk holds 16,777,216 bytes" in message
    assert "kafka_disk_share=0.5" in message


def test_an_own_retention_larger_than_the_disk_is_refused() -> None:
    own = topic("own", 1, 1, config={"retention.bytes": 80 * MIB})
    with pytest.raises(disk.DiskPlanError, match=r"retention\.bytes set on own"):
        disk.kafka_disk_plan([own], {"b": 100 * MIB}, 0.5, 1, 1 * MIB)
    unbounded = topic("forever", 1, 1, config={"retention.bytes": -1})
    with pytest.raises(disk.DiskPlanError, match=r"retention\.bytes=-1"):
        disk.kafka_disk_plan([unbounded], {"b": 100 * MIB}, 0.5, 1, 1 * MIB)


def test_brokers_outside_the_limit_are_left_out() -> None:
    assert disk.kafka_disk_plan(PIPELINE, {"pi-1": 0}, 0.5, 3, 256 * MIB) == {}
    alone = disk.kafka_disk_plan(PIPELINE, {"pi-1": 0, "pi-2": 30 * GIB}, 0.5, 3, 256 * MIB)
    assert alone == disk.kafka_disk_plan(PIPELINE, {"pi-2": 30 * GIB}, 0.5, 3, 256 * MIB)
