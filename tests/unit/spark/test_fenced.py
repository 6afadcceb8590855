"""A producer fenced by another with its transactional id is told apart from a failed call however
kafka-python says so (pikit_spark/sink.fenced): a send after the fence raises a KafkaError that
carries it. Taken for a broker's failure, the fenced writer retried after a backoff, and a test of
the partition writer's steps failed in a fresh clone's make test (2026-12-05)."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaError, KafkaTimeoutError, ProducerFencedError
from pikit_spark.sink import TransactionalSink, fenced


def test_a_fence_is_found_raised_or_carried() -> None:
    assert fenced(ProducerFencedError())
    carried = KafkaError("Cannot perform send because a previous request failed", ProducerFencedError())
    assert fenced(carried)
    assert not fenced(KafkaTimeoutError("commit_transaction not done in 30s"))
    assert not fenced(KafkaError("Cannot perform send", KafkaTimeoutError()))


def test_a_carried_fence_ends_the_retries_at_once() -> None:
    sink = TransactionalSink(["out"], "app", {"bootstrap_servers": ["nowhere:9092"]}, retry_for=60)
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise KafkaError("Cannot perform send because ...", ProducerFencedError())

    with pytest.raises(ProducerFencedError):
        sink.with_retries("batch 1", attempt)
    assert len(calls) == 1, "no retry: another writer holds the transactional id"
