"""What a driver settles with the standalone master (pikit_spark/standalone_master.py): the
applications its predecessors left there, unregistered (which ones, and when it stops looking),
its own registration watched (when a master has forgotten it, and when it only seems to), and its
executors spread over the Pis (which one moves, when none does, and how often it tries)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from pikit_spark.standalone_master import crowded_executor, evict, master_pages, predecessors, spread, watch


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


def worker(host: str, free: int, memory: int = 2048, state: str = "ALIVE") -> dict[str, Any]:
    return {"host": host, "coresfree": free, "memoryfree": memory, "state": state}


def test_the_newest_of_two_executors_on_one_host_moves_to_a_worker_with_room() -> None:
    # pi-2 holds both of the app's executors and is full; pi-3 is back, with nothing of the app.
    state = {"workers": [worker("pi-2", 0), worker("pi-3", 2), worker("pi-3", 3, state="DEAD")]}
    assert crowded_executor({"9": "pi-2", "10": "pi-2"}, state, 1, 512) == "10"
    # As many free cores there as pi-2 will have once one is gone: the master may choose either.
    assert crowded_executor(
        {"9": "pi-2", "10": "pi-2"}, {"workers": [worker("pi-2", 1), worker("pi-3", 2)]}, 1, 512
    )


def test_executors_stay_where_no_other_worker_has_room_for_one() -> None:
    together = {"1": "pi-2", "2": "pi-2"}
    assert crowded_executor({"1": "pi-2", "2": "pi-3"}, {"workers": [worker("pi-4", 3)]}, 1, 512) is None
    assert crowded_executor(together, {"workers": [worker("pi-2", 0), worker("pi-3", 0)]}, 1, 512) is None
    assert (
        crowded_executor(together, {"workers": [worker("pi-2", 0), worker("pi-3", 2, memory=256)]}, 1, 512)
        is None
    )
    assert (
        crowded_executor(together, {"workers": [worker("pi-2", 0), worker("pi-3", 2, state="DEAD")]}, 1, 512)
        is None
    )
    # Fewer free cores there than pi-2 will have: the master would start the replacement on pi-2.
    assert crowded_executor(together, {"workers": [worker("pi-2", 2), worker("pi-3", 2)]}, 1, 512) is None


def test_a_move_is_tried_between_batches_and_again_after_twice_as_long() -> None:
    looks: list[str] = []
    replaced: list[str] = []
    stop = threading.Event()
    state = {"status": "ALIVE", "workers": [worker("pi-2", 0), worker("pi-3", 2)]}
    batches = iter([True, False, False, False])  # a batch runs at the first look

    def busy() -> bool:
        return next(batches, False)

    def read(page: str) -> dict[str, Any]:
        looks.append(page)
        return state

    def replace(executor: str) -> None:
        replaced.append(executor)
        if len(replaced) == 2:
            stop.set()

    waits: list[float] = []

    class Clock(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            return stop.is_set()

    spread(lambda: {"1": "pi-2", "2": "pi-2"}, ["page"], replace, 1, 512, busy, read, 30.0, 120.0, Clock())
    assert replaced == ["2", "2"]  # the replacement landed on pi-2 again: tried once more
    assert waits == [30.0, 5.0, 120.0, 240.0]  # the look, a batch running, then after each move


def test_executors_that_cannot_be_listed_leave_the_look_for_later() -> None:
    stop = threading.Event()
    listed: list[int] = []
    state = {"status": "ALIVE", "workers": [worker("pi-2", 0), worker("pi-3", 2)]}

    def executors() -> dict[str, str]:
        listed.append(1)
        if len(listed) == 1:
            raise RuntimeError("py4j: the gateway is busy")
        stop.set()
        return {"1": "pi-2", "2": "pi-2"}

    replaced: list[str] = []
    spread(executors, ["page"], replaced.append, 1, 512, read=lambda page: state, look=0.0, stop=stop)
    assert len(listed) == 2 and replaced == ["2"]
