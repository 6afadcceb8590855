"""A new active driver unregisters the applications its predecessors left at the master
(pikit_spark/predecessors.py): which ones, and when it stops looking."""

from __future__ import annotations

from typing import Any

from pikit_spark.predecessors import evict, master_pages, predecessors


def app(app_id: str, name: str) -> dict[str, str]:
    return {"id": app_id, "name": name}


def test_only_other_applications_of_the_same_name_are_predecessors() -> None:
    state = {
        "activeapps": [
            app("app-1", "sensor_aggregates"),
            app("app-2", "anomaly_alerts"),
            app("app-3", "sensor_aggregates"),
        ],
        "waitingapps": [app("app-0", "sensor_aggregates")],
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
