"""The drivers' election (pikit_spark/leadership.py) against a real broker: the holder keeps the
app while it is in the group, whoever joins; a holder that goes silent is replaced within its
session; a holder that a newer claim replaces learns it lost; a standby's restart moves nothing."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from pikit_spark.batches import ensure_internal_topics
from pikit_spark.leadership import SESSION_TIMEOUT_MS, Leadership, LeadershipLostError

# A takeover: the session's end, then a rebalance.
TAKEOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 15


class Driver:
    """One app process's election, standing by in a thread of its own as a driver's start does."""

    def __init__(self, app: str, rank: int, member: str, broker: str) -> None:
        self.leadership = Leadership(app, rank, member, {"bootstrap_servers": [broker]})
        self.active = threading.Event()
        self.lost = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.leadership.wait(alive=lambda: None)
        except LeadershipLostError:
            return  # closed while it stood by
        self.active.set()
        self.leadership.keep(on_lost=self.lost.set)

    def settle(self, seconds: float = 4) -> None:
        time.sleep(seconds)


@pytest.fixture()
def app(broker: str) -> Iterator[str]:
    name = f"leader-{uuid.uuid4().hex[:8]}"
    ensure_internal_topics(name, 1, {"bootstrap_servers": [broker]})
    yield name


def test_the_holder_keeps_the_app_and_a_silent_one_is_replaced_within_its_session(
    broker: str, app: str
) -> None:
    second = Driver(app, 1, "pi-b", broker)
    assert second.active.wait(30), "a lone driver becomes the active one"
    first = Driver(app, 0, "pi-a", broker)  # ranked first, but the app has a holder
    first.settle()
    assert not first.active.is_set() and not second.lost.is_set(), "a driver that joins moves nothing"
    second.leadership.confirmed()  # the group hears from its holder

    second.leadership.close()  # a static member leaves no word: as a Pi that lost power
    gone = time.monotonic()
    assert first.active.wait(TAKEOVER_BOUND_S), f"no takeover within {TAKEOVER_BOUND_S:.0f}s"
    print(f"\n[election] takeover {time.monotonic() - gone:.1f}s after the holder went silent")

    again = Driver(app, 1, "pi-b", broker)  # the Pi back, its driver a standby now
    again.settle()
    assert not again.active.is_set() and not first.lost.is_set(), "a standby's return moves nothing"
    first.leadership.confirmed()
    for driver in (first, again):
        driver.leadership.close()


def test_a_holder_replaced_while_cut_off_learns_it_lost_and_cannot_confirm(broker: str, app: str) -> None:
    holder = Driver(app, 0, "pi-a", broker)
    assert holder.active.wait(30)
    # A driver that took the app over while the holder was cut off claims a newer generation.
    newer = Leadership(app, 1, "pi-b", {"bootstrap_servers": [broker]})
    newer.assignor.held_since = holder.leadership.assignor.held_since + 100
    taken = threading.Event()

    def take() -> None:
        newer.wait(alive=lambda: None)
        taken.set()

    threading.Thread(target=take, daemon=True).start()
    assert taken.wait(30), "the newer claim wins"
    assert holder.lost.wait(30), "the replaced holder learns it lost"
    with pytest.raises(LeadershipLostError):
        holder.leadership.confirmed()
    newer.confirmed()
    for leadership in (holder.leadership, newer):
        leadership.close()
