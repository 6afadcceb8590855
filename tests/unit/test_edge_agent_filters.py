"""The edge_agent role's filters: the roll-out's reading of the agent's metrics, and pruning."""

from __future__ import annotations

from types import ModuleType

from tests.conftest import load_filter_plugin

PAGE = """# HELP edge_agent_build_info The running agent's release (label version); always 1.
# TYPE edge_agent_build_info gauge
edge_agent_build_info{version="0.1.1"} 1
edge_agent_start_time_seconds 1795323249.5
edge_agent_readings_sent_total 1200
edge_agent_readings_dropped_total{reason="oldest"} 0
edge_agent_readings_dropped_total{reason="disk_full"} 3
"""


def load() -> ModuleType:
    return load_filter_plugin("edge_agent", "edge_agent_filters")


def test_the_metrics_page_is_read_by_family_and_label() -> None:
    metrics = load().edge_agent_metrics(PAGE)
    assert metrics["edge_agent_build_info"] == {"0.1.1": 1.0}
    assert metrics["edge_agent_readings_sent_total"] == 1200.0
    assert metrics["edge_agent_readings_dropped_total"] == {"oldest": 0.0, "disk_full": 3.0}


def test_a_release_is_healthy_once_it_runs_and_kafka_acknowledged_a_reading() -> None:
    f = load()
    page = {"status": 200, "content": PAGE}
    assert f.edge_agent_metrics_health(page, "0.1.1") == ""
    assert f.edge_agent_metrics_health(page, "0.1.2") == "the agent runs release 0.1.1, not 0.1.2"
    quiet = {"status": 200, "content": PAGE.replace("sent_total 1200", "sent_total 0")}
    assert "acknowledged no reading" in f.edge_agent_metrics_health(quiet, "0.1.1")
    old = {"status": 200, "content": "edge_agent_readings_sent_total 5\n"}
    assert "do not name a release" in f.edge_agent_metrics_health(old, "0.1.1")
    down = {"status": -1, "msg": "Connection refused"}
    assert "not reachable (Connection refused)" in f.edge_agent_metrics_health(down, "0.1.1")
    assert f.edge_agent_metrics_health({"skipped": True}, "0.1.1") == "", "metrics off: Kafka alone decides"


def test_the_start_time_bounds_the_search_in_kafka() -> None:
    f = load()
    assert f.edge_agent_started_ms({"content": PAGE}, 5.0) == 1795323249500
    assert f.edge_agent_started_ms({"skipped": True}, 5.0) == 5000


def test_only_the_current_and_previous_releases_are_kept() -> None:
    found = [
        "/opt/edge-agent/releases/0.1.0",
        "/opt/edge-agent/releases/0.1.1",
        "/opt/edge-agent/releases/0.1.2",
    ]
    assert load().edge_agent_releases_to_prune(found, ["0.1.2", "0.1.1"]) == [
        "/opt/edge-agent/releases/0.1.0"
    ]
    assert load().edge_agent_releases_to_prune(found, ["0.1.2", ""]) == found[:2]


APP_PAGE = """# HELP pikit_app_reading_schema 1 for each version of the reading contract the app's code reads
# TYPE pikit_app_reading_schema gauge
pikit_app_reading_schema{app="sensor_aggregates",schema="1"} 1
pikit_app_reading_schema{app="sensor_aggregates",schema="2"} 1
"""


def _page(url: str, content: str = "", status: int = 200) -> dict[str, object]:
    return {"url": url, "status": status, "content": content, "msg": "OK" if status == 200 else "refused"}


def test_an_app_says_which_contract_versions_it_reads_and_an_older_one_reads_1() -> None:
    assert load().edge_agent_schemas_read(APP_PAGE) == [1, 2]
    assert load().edge_agent_schemas_read("pikit_app_state_rows 3\n") == [1], "code before the versions"


def test_a_release_rolls_out_only_when_every_app_reads_what_it_writes() -> None:
    refusal = load().edge_agent_contract_refusal
    v1_app = _page("pi-4:9432", "pikit_app_state_rows 3\n")
    assert refusal([_page("pi-4:9431", APP_PAGE), _page("pi-4:9432", APP_PAGE)], "0.2.0", 2) == ""
    assert refusal([_page("pi-4:9431", APP_PAGE), v1_app], "0.1.0", 1) == ""
    why = refusal([_page("pi-4:9431", APP_PAGE), v1_app], "0.2.0", 2)
    assert why.startswith("agent release 0.2.0 writes version 2 of the reading contract, but the app at ")
    assert "pi-4:9431" not in why
    assert "reads version 1. Apps first, then agents" in why and "No device was changed." in why
    down = refusal([_page("pi-4:9431", status=-1)], "0.2.0", 2)
    assert "the app at pi-4:9431 does not answer (refused)" in down


def test_the_devices_about_to_move_are_those_on_another_release_or_none() -> None:
    def running(target: str | None) -> dict[str, object]:
        stat = {"exists": True, "islnk": True, "lnk_target": target} if target else {"exists": False}
        return {"_edge_agent_running": {"stat": stat}}

    hostvars = {
        "edge-1": running("/opt/pikit-agent/releases/0.2.0"),
        "edge-2": running("/opt/pikit-agent/releases/0.1.0"),
        "edge-3": running(None),
        "edge-4": {},
    }
    movers = load().edge_agent_movers(hostvars, sorted(hostvars), "0.2.0")
    assert movers == ["edge-2", "edge-3", "edge-4"]
    assert load().edge_agent_movers(hostvars, ["edge-1"], "0.2.0") == []
