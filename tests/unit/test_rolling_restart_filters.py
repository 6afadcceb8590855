"""The rolling_restart role's filter plugins: which hosts restart, in which order, and why."""

from __future__ import annotations

from types import ModuleType

from tests.conftest import load_filter_plugin


def load() -> ModuleType:
    return load_filter_plugin("rolling_restart", "rolling_restart_filters")


def test_reasons_are_the_names_of_what_changed_after_those_still_pending() -> None:
    changes = {
        "server.properties": {"changed": True, "diff": []},  # a registered result
        "certificate": "False",  # a fact templated to text
        "service unit": "True",
        "version": False,
    }
    assert load().rolling_restart_reasons(changes, ["certificate"]) == [
        "certificate",
        "server.properties",
        "service unit",
    ]
    assert load().rolling_restart_reasons({"version": {"changed": False}}, []) == []


def test_a_reason_pending_and_changed_again_is_given_once() -> None:
    assert load().rolling_restart_reasons({"certificate": True}, ["certificate"]) == ["certificate"]


def test_the_plan_follows_the_order_and_holds_only_hosts_with_reasons() -> None:
    def pending(reasons: list[str], service: str = "kafka") -> dict[str, object]:
        return {"rolling_restart_pending": {service: {"units": [service], "reasons": reasons}}}

    hostvars = {
        "pi-1": pending(["server.properties"]),
        "pi-2": pending([]),
        "pi-3": pending(["certificate"]),
        "pi-4": pending(["version"], service="spark"),
        "pi-5": {},
    }
    plan = load().rolling_restart_plan(["pi-3", "pi-2", "pi-1", "pi-4", "pi-5", "absent"], hostvars, "kafka")
    assert plan == [
        {"host": "pi-3", "units": ["kafka"], "reasons": ["certificate"]},
        {"host": "pi-1", "units": ["kafka"], "reasons": ["server.properties"]},
    ]
