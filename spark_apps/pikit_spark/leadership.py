"""One active driver per app, on whichever of its driver Pis is alive (docs/design/any-pi-dies.md).

Each driver Pi (the inventory's `spark_driver` group) runs every streaming app's unit. Each of
those processes joins the consumer group `pikit-spark-<app>-leader` on the one-partition topic of
that name; the member that is assigned the partition is the app's active driver. It starts its
Spark session and resumes from what Kafka holds (pikit_spark/app.py). The others stand by: no
session, no executors, their metrics page served and systemd told they are alive.

Kafka's group protocol is the election, so a site needs no ZooKeeper for it: a member that stops
heartbeating (its Pi lost power, its network is cut, its process is frozen) is out of the group
after SESSION_TIMEOUT_MS, and the partition goes to another member. `StayingLeader`, the group's
assignor, keeps the partition with its holder while the holder is in the group, so a broker outage
or a standby's restart moves nothing; otherwise it goes to the member whose Pi is listed first.
Each process is a static member (its host is its `group.instance.id`): a driver that systemd
restarts on the same Pi takes its own place back at once, without waiting for the session to end.

A driver that loses the partition exits at once, and systemd starts it again as a standby: its
query's state is that of its own last batch, and the batches the new holder commits make it
stale. Until it learns of the loss, the transactional sink will not open a producer without
`confirmed()` leadership, so a driver that was cut off and comes back cannot fence the one that
replaced it; if one ever did, its next commit would stop it (the sink's `SupersededError`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer
from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from pikit_contract.names import spark_leader_topic

from pikit_spark.sink import SupersededError

LOG = logging.getLogger("pikit.leadership")

# How long a silent member keeps its place: a takeover begins this long after the active driver's
# Pi dies. Kafka's floor (group.min.session.timeout.ms) is 6 s; heartbeats go every third of it.
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 3_000
# How long a rebalance waits for members that have not joined again (the rebalance timeout).
REBALANCE_TIMEOUT_MS = 30_000
POLL_S = 1.0
# The exit status of a driver that lost its leadership; systemd starts it again (Restart=always).
EXIT_LOST = 75


class LeadershipLostError(SupersededError):
    """The app's partition went to another driver: this one must stop and stand by."""


class NotConfirmedError(RuntimeError):
    """The group has not heard from this driver recently: it may have been replaced. Retriable."""


@dataclass(frozen=True)
class Claim:
    """What a member tells the group when it joins: its Pi's rank in the inventory (0 first) and
    the generation since which it holds the partition (-1: it does not)."""

    rank: int
    held_since: int = -1

    def encode(self) -> bytes:
        return json.dumps({"rank": self.rank, "held_since": self.held_since}).encode()

    @classmethod
    def decode(cls, data: bytes | None) -> Claim:
        try:
            doc = json.loads(data or b"{}")
            return cls(int(doc["rank"]), int(doc.get("held_since", -1)))
        except (ValueError, KeyError, TypeError):
            return cls(rank=1 << 30)  # a member of another release: last in line


def choose(claims: Mapping[str, Claim]) -> str:
    """The member that gets the partition: the holder (if two claim it, one cut off and replaced,
    the one that took it last), else the first-ranked; member ids break ties."""
    holders = [m for m, c in claims.items() if c.held_since >= 0]
    if holders:
        return min(holders, key=lambda m: (-claims[m].held_since, claims[m].rank, m))
    return min(claims, key=lambda m: (claims[m].rank, m))


class StayingLeader(AbstractPartitionAssignor):  # type: ignore[misc]
    """The group's assignor: every partition of the topic (one) to the member `choose` picks."""

    name = "pikit-leader"
    version = 0

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.held_since = -1
        self.assigned_at = float("-inf")  # time.monotonic() of the last assignment

    def metadata(self, topics: Any) -> ConsumerProtocolSubscription:
        return ConsumerProtocolSubscription(
            self.version, sorted(topics), Claim(self.rank, self.held_since).encode()
        )

    def assign(self, cluster: Any, members: Sequence[Any]) -> dict[str, ConsumerProtocolAssignment]:
        claims = {m.member_id: Claim.decode(m.metadata.user_data) for m in members}
        topics = sorted({t for m in members for t in m.metadata.topics})
        chosen = choose(claims)
        LOG.info("the group's members %s; the partition to %s", claims, chosen)
        held = [(t, sorted(cluster.partitions_for_topic(t) or [])) for t in topics]
        return {
            m.member_id: ConsumerProtocolAssignment(self.version, held if m.member_id == chosen else [], b"")
            for m in members
        }

    def on_assignment(self, assignment: ConsumerProtocolAssignment, generation: int) -> None:
        self.assigned_at = time.monotonic()
        holds = bool(assignment.partitions())
        if not holds:
            self.held_since = -1
        elif self.held_since < 0:
            self.held_since = generation


class Leadership:
    """This driver's place in its app's election."""

    def __init__(self, app: str, rank: int, member: str, client: Mapping[str, Any]) -> None:
        self.topic = spark_leader_topic(app)
        self.assignor = StayingLeader(rank)
        self.consumer = KafkaConsumer(
            **client,
            group_id=self.topic,
            group_instance_id=member,
            partition_assignment_strategy=[self.assignor],
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=REBALANCE_TIMEOUT_MS,
            enable_auto_commit=False,
        )
        self.consumer.subscribe([self.topic])
        self._held = False
        self._lost = threading.Event()
        self._closed = False

    def _poll(self) -> None:
        if self._closed:
            raise LeadershipLostError(f"{self.topic}: closed")
        self.consumer.poll(timeout_ms=int(POLL_S * 1000), max_records=1)
        holds = self.assignor.held_since >= 0 and self.assignor.assigned_at > float("-inf")
        if self._held and not holds:
            self._lost.set()
        self._held = holds

    def _turn(self) -> None:
        """One poll; with the brokers away, a warning and a pause (the group's own timeouts decide).
        LeadershipLostError once closed."""
        try:
            self._poll()
        except LeadershipLostError:
            raise
        except Exception as exc:
            LOG.warning("%s: %s", self.topic, exc)
            time.sleep(POLL_S)

    def wait(self, alive: Callable[[], None]) -> None:
        """Stand by until this driver holds the partition, calling `alive()` at every turn."""
        LOG.info("%s: standing by", self.topic)
        while not self._held:
            self._turn()
            alive()
        LOG.info("%s: this driver is the app's active one now", self.topic)

    def keep(self, on_lost: Callable[[], None] | None = None) -> threading.Thread:
        """From a thread, stay in the group; `on_lost()` (by default: exit EXIT_LOST) when the
        partition goes to another member."""

        def run() -> None:
            while not self._lost.is_set():
                try:
                    self._turn()
                except LeadershipLostError:
                    return  # closed
            LOG.error("%s: another driver holds the app now; this one stops", self.topic)
            (on_lost or _exit_lost)()

        thread = threading.Thread(target=run, name="pikit-leadership", daemon=True)
        thread.start()
        return thread

    def confirmed(self, wait_s: float = SESSION_TIMEOUT_MS / 1000) -> None:
        """Return once the group has heard from this driver as its holder within half a session,
        waiting up to `wait_s` for its next heartbeat (after a broker outage the group answers
        seconds after the brokers do). Raise LeadershipLostError when the app went to another
        driver, NotConfirmedError when the group did not answer in time (retriable)."""
        deadline = time.monotonic() + wait_s
        while True:
            if self._lost.is_set() or not self._held:
                raise LeadershipLostError(self.topic)
            heard = max(self.consumer._coordinator.heartbeat.last_receive, self.assignor.assigned_at)
            silent = time.monotonic() - heard
            if silent <= SESSION_TIMEOUT_MS / 2000:
                return
            if time.monotonic() >= deadline:
                raise NotConfirmedError(f"{self.topic}: no heartbeat answered for {silent:.0f}s")
            time.sleep(0.2)

    def close(self) -> None:
        self._closed = True
        self.consumer.close()


def _exit_lost() -> None:
    logging.shutdown()
    os._exit(EXIT_LOST)
