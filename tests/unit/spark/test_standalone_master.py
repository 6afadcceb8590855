"""What a driver settles with the standalone master (pikit_spark/standalone_master.py): the
applications its predecessors left there, unregistered (which ones, and when it stops looking),
and its own registration watched (when a master has forgotten it, and when it only seems to)."""

from __future__ import annotations

import contextlib
from typing import Any

from pikit_spark.standalone_master import evict, master_pages, predecessors, watch


def app(app_id: str, name: str) -> dict[str, str]:
    return {"id": app_id, "name": name}


def test_only_other_applications_of_the_same_name_are_predecessors() -> None:
    state = {
        "activeapps": [
            app("app-0", "sensor_aggregates"),
            app("app-1", "sensor_aggregates"),
            app("app-2", "anomaly_alerts"),
            app("app-3", "sensor_aggregates"),
        ],
    }
    assert predecessors(state, "sensor_aggregates", mine="app-3") == ["app-0", "app-1"]
    assert predecessors(state, "anomaly_alerts", mine="app-2") == []
    assert predecessors({}, "sensor_aggregates", mine="app-3") == []


def test_each_master_has_its_page() -> None:
    assert master_pages("spark://10.0.0.4:7077", 8080) == ["http://10.0.0.4:8080/json/"]
    assert master_pages("spark://pi-4:7077,pi-5:7077", 8090) == [
        "http://pi-4:8090/json/",
        "http://pi-5:8090/json/",
    ]


class Master:
    """The master's page as it changes: each read returns the next state, then the last one."""

    def __init__(self, *states: dict[str, Any]) -> None:
        self.states = list(states)
        self.unregistered: list[str] = []

    def read(self, page: str) -> dict[str, Any]:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def unregister(self, app_id: str) -> None:
        self.unregistered.append(app_id)


def test_the_dead_drivers_application_is_unregistered_once() -> None:
    stale_and_mine = {"activeapps": [app("app-1", "sensor_aggregates"), app("app-2", "sensor_aggregates")]}
    # The master removes it a moment later; meanwhile it is still listed.
    master = Master(stale_and_mine, stale_and_mine, {"activeapps": [app("app-2", "sensor_aggregates")]})
    evicted = evict(
        "sensor_aggregates", "app-2", ["page"], master.unregister, master.read, look_for=5, every=0
    )
    assert evicted == ["app-1"]
    assert master.unregistered == ["app-1"]


def test_it_looks_until_the_master_lists_this_application() -> None:
    # A master that has not registered this driver yet (still recovering) lists no predecessor
    # either: that says nothing yet.
    master = Master(
        {"activeapps": []},
        {"activeapps": [app("app-1", "sensor_aggregates")]},
        {"activeapps": [app("app-1", "sensor_aggregates"), app("app-2", "sensor_aggregates")]},
        {"activeapps": [app("app-2", "sensor_aggregates")]},
    )
    assert evict(
        "sensor_aggregates", "app-2", ["page"], master.unregister, master.read, look_for=5, every=0
    ) == ["app-1"]


def test_a_master_that_does_not_answer_is_given_up_on_in_time() -> None:
    def away(page: str) -> dict[str, Any]:
        raise OSError("connection refused")

    assert evict("sensor_aggregates", "app-2", ["page"], lambda _: None, away, look_for=0.2, every=0.05) == []


def alive(*ids: str) -> dict[str, Any]:
    return {"status": "ALIVE", "activeapps": [app(i, "sensor_aggregates") for i in ids]}


def watched(*states: dict[str, Any] | Exception, after: int = 3) -> int:
    """How many looks the watch took before it called the app forgotten (0: it never did)."""
    looks = iter(states)
    taken = 0
    forgotten: list[int] = []

    def read(page: str) -> dict[str, Any]:
        nonlocal taken
        taken += 1
        state = next(looks, None)
        if state is None:
            raise StopIteration
        if isinstance(state, Exception):
            raise state
        return state

    with contextlib.suppress(StopIteration):
        watch("app-2", ["page"], lambda: forgotten.append(taken), read, every=0, after=after)
    return forgotten[0] if forgotten else 0


def test_a_master_that_forgot_the_application_ends_the_driver_after_three_looks() -> None:
    # Re-flashed: it answers, alive, with none of the apps it had.
    assert watched(alive("app-2"), alive(), alive(), alive(), alive()) == 4


def test_a_master_away_in_recovery_or_listing_it_again_says_nothing() -> None:
    recovering = {"status": "RECOVERING", "activeapps": []}
    away = OSError("connection refused")
    assert watched(alive(), alive(), away, alive(), recovering, alive("app-2"), alive(), alive()) == 0
    assert watched(*[away] * 10, recovering, recovering) == 0
