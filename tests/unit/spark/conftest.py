"""A local SparkSession for the apps' transformation tests (the cluster is molecule's job)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pikit_testkit.local_spark import local_session
from py4j import protocol  # type: ignore[import-untyped]
from py4j.java_gateway import GatewayClient  # type: ignore[import-untyped]
from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_session("pikit-unit")
    yield session
    session.stop()


JobCounter = Callable[[Callable[[], object]], int]


@pytest.fixture
def spark_jobs(spark: SparkSession) -> JobCounter:
    """How many Spark jobs a call runs: on a Pi cluster each costs a second or more, whatever its size."""

    def count(run: Callable[[], object]) -> int:
        group = uuid.uuid4().hex
        spark.sparkContext.setJobGroup(group, "counted")
        try:
            run()
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))

    return count


@pytest.fixture
def jvm_calls(monkeypatch: pytest.MonkeyPatch) -> JobCounter:
    """How many round trips to the driver's JVM a call makes (py4j commands): on a loaded Pi each
    costs a millisecond or more, and building a plan can take hundreds.

    py4j's release of dead proxies is not counted: Python's garbage collector decides when it
    runs, so it adds a varying number of commands (CI once saw 281 where a quiet run sees 163)
    that says nothing about the code under test."""
    sent = [0]
    send = GatewayClient.send_command
    release = protocol.MEMORY_COMMAND_NAME + protocol.MEMORY_DEL_SUBCOMMAND_NAME

    def counted(self: GatewayClient, command: str, *args: Any, **kwargs: Any) -> Any:
        if not command.startswith(release):
            sent[0] += 1
        return send(self, command, *args, **kwargs)

    monkeypatch.setattr(GatewayClient, "send_command", counted)

    def count(run: Callable[[], object]) -> int:
        before = sent[0]
        run()
        return sent[0] - before

    return count
