from pikit.status import Part, held_out_workers, worker_parts
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


def node(name: str, os: str, version_id: str) -> Part:
    return Part(name, {"os": os, "os_version_id": version_id})


def test_a_worker_on_another_release_than_the_master_is_held_out_not_a_problem() -> None:
    nodes = [
        node("pi-4", "Debian GNU/Linux 13 (trixie)", "13"),
        node("pi-2", "Debian GNU/Linux 12 (bookworm)", "12"),
    ]
    nodes += [node("pi-3", "Debian GNU/Linux 13 (trixie)", "13")]
    held = held_out_workers(["pi-2", "pi-3"], "pi-4", nodes)
    assert list(held) == ["pi-2"] and "bookworm" in held["pi-2"] and "trixie" in held["pi-2"]
    parts = worker_parts([registration("10.0.0.13", "ALIVE")], HOSTS, set(), held)
    assert summary(parts) == {"worker pi-2": (None, []), "worker pi-3": ("ALIVE", [])}
    assert "held out of service: it runs Debian GNU/Linux 12 (bookworm)" in describe("spark", parts[0])
    alive = worker_parts([registration("10.0.0.12", "ALIVE")], HOSTS, set(), held)
    assert summary(alive)["worker pi-2"][1] == [f"ALIVE, but {held['pi-2']}: playbooks/spark.yml not run"]


def test_a_release_not_known_holds_no_worker_out() -> None:
    assert held_out_workers(["pi-2"], "pi-4", [node("pi-2", "Debian 12", "12")]) == {}
    assert held_out_workers(["pi-2"], "pi-4", [node("pi-4", "Debian 13", "13"), Part("pi-2")]) == {}
