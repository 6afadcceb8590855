"""Where kafka_admin's rebalance moves replicas: off the brokers leaving, onto the ones joining."""

from __future__ import annotations

import base64
import itertools
import uuid
from collections import Counter

import pytest
from ansible_collections.pikit.cluster.plugins.modules import kafka_admin

balanced_assignment = kafka_admin.balanced_assignment


Assignment = dict[tuple[str, int], list[int]]


def cluster(partitions: int, brokers: list[int], rf: int, topics: tuple[str, ...] = ("a", "b")) -> Assignment:
    """Replicas laid out round-robin, as Kafka places a new topic's."""
    out: Assignment = {}
    for topic, p in itertools.product(topics, range(partitions)):
        out[(topic, p)] = [brokers[(p + i) % len(brokers)] for i in range(rf)]
    return out


def after(current: Assignment, moves: Assignment) -> Assignment:
    return {**current, **moves}


def loads(assignment: Assignment) -> Counter[int]:
    return Counter(b for replicas in assignment.values() for b in replicas)


def test_a_balanced_cluster_moves_nothing() -> None:
    assert balanced_assignment(cluster(6, [1, 2, 3], 3), [1, 2, 3]) == {}
    assert balanced_assignment(cluster(6, [1, 2, 3], 2), [1, 2, 3]) == {}


def test_a_new_broker_gets_its_share_and_every_partition_keeps_its_replication_factor() -> None:
    current = cluster(6, [1, 2, 3], 3)  # 36 replicas on 3 brokers
    moves = balanced_assignment(current, [1, 2, 3, 4])
    target = after(current, moves)
    assert loads(target) == {1: 9, 2: 9, 3: 9, 4: 9}
    assert all(len(set(r)) == 3 for r in target.values())
    assert len(moves) == 9, "only the replicas the new broker takes move"


def test_a_leaving_broker_is_emptied_and_the_rest_stay_balanced() -> None:
    current = cluster(6, [1, 2, 3, 4], 2)
    moves = balanced_assignment(current, [1, 2, 3])
    target = after(current, moves)
    assert 4 not in loads(target)
    assert max(loads(target).values()) - min(loads(target).values()) <= 1
    assert all(len(set(r)) == 2 for r in target.values())
    assert all(4 in current[tp] for tp in moves), "partitions without the leaving broker stay"


def test_a_moved_replica_takes_the_old_ones_place_in_the_list() -> None:
    moves = balanced_assignment({("t", 0): [4, 1]}, [1, 2])
    assert moves == {("t", 0): [2, 1]}


def test_the_plan_is_deterministic_and_a_second_pass_moves_nothing() -> None:
    current = cluster(5, [1, 2, 3], 3, ("x", "y", "z"))
    first = balanced_assignment(current, [2, 3, 4, 5])
    assert first == balanced_assignment(current, [5, 4, 3, 2])
    assert balanced_assignment(after(current, first), [2, 3, 4, 5]) == {}


def test_too_few_brokers_for_a_replication_factor_is_refused_naming_the_partition() -> None:
    with pytest.raises(ValueError, match="t-0 has 3 replicas, more than the 2 brokers in service"):
        balanced_assignment({("t", 0): [1, 2, 3]}, [1, 2])


def test_a_directory_id_is_printed_as_kafka_s_tools_take_it() -> None:
    """The quorum's voters carry their metadata directory's id; remove-controller takes it in
    Kafka's own form (base64url, no padding), as meta.properties writes it."""
    raw = uuid.UUID("1c863c9a-2b43-4d2a-8e8f-5f6a7b8c9d0e")
    printed = kafka_admin.kafka_uuid(raw)
    assert len(printed) == 22
    assert base64.urlsafe_b64decode(printed + "==") == raw.bytes
    assert kafka_admin.kafka_uuid(str(raw)) == printed
    assert kafka_admin.kafka_uuid(None) == ""
    assert kafka_admin.kafka_uuid(uuid.UUID(int=0)) == ""  # a voter formatted before KIP-853
