from pikit.status import Part, worker_parts
from pikit.status_render import describe

HOSTS = {"10.0.0.12": "pi-2", "10.0.0.13": "pi-3"}


def registration(address: str, state: str) -> dict[str, object]:
    return {"host": address, "state": state, "cores": 4, "coresused": 2}


def summary(parts: list[Part]) -> dict[str, tuple[object, list[str]]]:
    return {p.name: (p.details.get("state"), p.problems) for p in parts}


def test_a_worker_that_came_back_is_its_live_registration_whatever_the_order() -> None:
    for order in (1, -1):
        found = worker_parts(
            [
                registration("10.0.0.12", "DEAD"),
                registration("10.0.0.12", "ALIVE"),
                registration("10.0.0.13", "ALIVE"),
            ][::order],
            HOSTS,
            set(),
        )
        assert summary(found) == {"worker pi-2": ("ALIVE", []), "worker pi-3": ("ALIVE", [])}


def test_a_dead_or_missing_worker_in_service_is_a_problem() -> None:
    found = summary(worker_parts([registration("10.0.0.12", "DEAD")], HOSTS, set()))
    assert found == {
        "worker pi-2": ("DEAD", ["worker is DEAD"]),
        "worker pi-3": ("missing", ["not registered with the master"]),
    }


def test_a_decommissioned_worker_is_expected_gone_and_named_if_still_alive() -> None:
    gone = worker_parts(
        [registration("10.0.0.12", "ALIVE"), registration("10.0.0.13", "DEAD")], HOSTS, {"pi-3"}
    )
    assert summary(gone) == {"worker pi-2": ("ALIVE", []), "worker pi-3": ("DEAD", [])}
    assert "out of service" in describe("spark", gone[1])
    unregistered = worker_parts([registration("10.0.0.12", "ALIVE")], HOSTS, {"pi-3"})
    assert summary(unregistered)["worker pi-3"] == (None, [])
    still = worker_parts(
        [registration("10.0.0.12", "ALIVE"), registration("10.0.0.13", "ALIVE")], HOSTS, {"pi-3"}
    )
    assert summary(still)["worker pi-3"][1] == [
        "ALIVE, but spark_workers_decommissioned lists it: playbooks/spark.yml not run"
    ]
