"""Drains the spool through a link; a reading leaves the spool only after the far end acknowledged it.

Rounds of RECORDS_PER_ROUND records are pipelined: up to ROUNDS_IN_FLIGHT are sent while
the oldest awaits its acknowledgement, and the spool is committed round by round, in
order. Only after an agent crash or a failed link can the rounds that were in flight be
sent again (at most ROUNDS_IN_FLIGHT x RECORDS_PER_ROUND records; consumers drop them by
device and seq). Failures back off exponentially with jitter, capped at MAX_BACKOFF_S.
The link is Kafka's (edge_agent/kafka_link.py); this part knows nothing of Kafka.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from pikit_contract.failpoints import BEFORE_SPOOL_COMMIT, fire_if_armed

from edge_agent.metrics import Metrics
from edge_agent.spool import Record, Spool

log = logging.getLogger("edge_agent.sender")
RECORDS_PER_ROUND = 50
ROUNDS_IN_FLIGHT = 4
MAX_BACKOFF_S = 4.0


class Link(Protocol):
    def submit(self, records: list[Record]) -> Any:
        """Send one round; returns what `acknowledged` waits on."""

    def acknowledged(self, sent: Any, give_up: Callable[[], bool]) -> bool:
        """Wait for a round's acknowledgement; False when `give_up()` first. Raises the far end's error."""

    def close(self, timeout: float) -> None: ...


def backoff(failures: int) -> float:
    """Seconds before the next attempt: 0.5, 1, 2, then MAX_BACKOFF_S, each with ±25 % jitter."""
    return float(min(MAX_BACKOFF_S, 0.5 * 2.0 ** min(failures - 1, 8)) * random.uniform(0.75, 1.25))


class Sender:
    def __init__(
        self, spool: Spool, metrics: Metrics, wakeup: threading.Event, link: Link, readings_per_record: int
    ) -> None:
        self.spool = spool
        self.metrics = metrics
        self.wakeup = wakeup
        self.link = link
        self.per_round = readings_per_record * RECORDS_PER_ROUND
        self.failures = 0
        # When the loop last turned or, waiting on an acknowledgement, looked up: what the
        # agent's watchdog tells systemd (pikit_contract/watchdog.py). Waits in the loop are bounded
        # (a second per look, the producer's max_block_ms, the backoff): only a hang stops it.
        self.last_turn = time.time()

    def run(self, stop: threading.Event, drain_deadline: list[float]) -> None:
        """Send until `stop`; then keep draining until `drain_deadline[0]` (monotonic)."""

        def give_up() -> bool:
            self.last_turn = time.time()
            return stop.is_set() and time.monotonic() >= drain_deadline[0]

        # (last spool index, readings, what the link waits on) of each round not yet acknowledged
        in_flight: deque[tuple[int, int, Any]] = deque()
        while True:
            if give_up() or (stop.is_set() and self.spool.depth == 0 and not in_flight):
                break
            try:
                while len(in_flight) < ROUNDS_IN_FLIGHT:
                    records = self.spool.read(self.per_round, after=in_flight[-1][0] if in_flight else None)
                    if not records:
                        break
                    in_flight.append((records[-1].index, len(records), self.link.submit(records)))
                if not in_flight:
                    self.wakeup.wait(0.5)
                    self.wakeup.clear()
                    continue
                last, count, sent = in_flight[0]
                if not self.link.acknowledged(sent, give_up):
                    continue  # stopping: unacknowledged rounds stay in the spool for the next start
                in_flight.popleft()
                fire_if_armed(str(self.spool.dir), BEFORE_SPOOL_COMMIT)
                self.spool.commit(last)
                self.metrics.sent += count
                self.metrics.last_success = time.time()
                self.failures = 0
            except Exception as exc:  # any failure: keep the readings, back off, try again
                in_flight.clear()
                self.metrics.send_errors += 1
                self.failures += 1
                delay = backoff(self.failures)
                log.warning(
                    "send failed (%s: %s); %d readings wait in the spool; retry in %.1fs",
                    type(exc).__name__,
                    exc,
                    self.spool.depth,
                    delay,
                )
                self.link.close(timeout=0)
                stop.wait(delay)
                if give_up():
                    break
        self.link.close(timeout=5)
