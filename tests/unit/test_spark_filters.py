"""The spark role's filter plugins."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from tests.conftest import load_filter_plugin


def load() -> ModuleType:
    return load_filter_plugin("spark", "spark_filters")


PORTS = {
    "master_url": "spark://10.0.0.1:7077",
    "master_port": 7077,
    "master_webui_port": 8080,
    "worker_port": 7078,
    "worker_webui_port": 8081,
    "data_dir": "/srv/pikit/spark",
}
NODE = {"address": "10.0.0.1", "cores": 3, "memory_mb": 1500}


def test_a_master_that_also_works_runs_both_daemons_and_the_history_server_when_asked() -> None:
    services = load().spark_services(NODE, master=True, worker=True, history=True, **PORTS)
    assert [s["name"] for s in services] == ["spark-master", "spark-history", "spark-worker"]
    assert services[0]["args"] == (
        "org.apache.spark.deploy.master.Master --host 10.0.0.1 --port 7077 --webui-port 8080"
    )
    assert services[2]["args"] == (
        "org.apache.spark.deploy.worker.Worker --host 10.0.0.1 --port 7078 --webui-port 8081 --cores 3"
        " --memory 1500m --work-dir /srv/pikit/spark/work spark://10.0.0.1:7077"
    )


def test_a_worker_runs_only_a_worker_and_the_history_server_needs_the_master() -> None:
    services = load().spark_services(NODE, master=False, worker=True, history=True, **PORTS)
    assert [s["name"] for s in services] == ["spark-worker"]
    assert (
        load().spark_services(NODE, master=True, worker=False, history=False, **PORTS)[0]["what"] == "master"
    )


SUBMIT = {"master_url": "spark://10.0.0.1:7077", "driver_host": "10.0.0.1", "apps_dir": "/opt/spark/apps"}


def test_an_apps_typed_options_become_its_command_line_in_order() -> None:
    options = {
        "kafka_properties": "/etc/spark/kafka-client.properties",
        "silent_after_seconds": 300,
        "threshold": ["cpu.temperature=:80", "simulated.humidity=15:75"],
        "adopt_new_checkpoint": True,
        "device_keys": "",
        "metrics_listen": None,
        "stall_after_seconds": 600.5,
        "verbose": False,
    }
    argv = load().spark_submit_argv("anomaly_alerts", {"total_cores": 1}, options=options, **SUBMIT)
    assert argv == [
        "/usr/local/bin/spark-submit", "--master", "spark://10.0.0.1:7077", "--deploy-mode", "client",
        "--name", "anomaly_alerts", "--conf", "spark.driver.host=10.0.0.1", "--total-executor-cores", "1",
        "--py-files", "/opt/spark/apps/anomaly_alerts.zip", "/opt/spark/apps/anomaly_alerts.py",
        "--kafka-properties", "/etc/spark/kafka-client.properties", "--silent-after-seconds", "300",
        "--threshold", "cpu.temperature=:80", "--threshold", "simulated.humidity=15:75",
        "--adopt-new-checkpoint", "--stall-after-seconds", "600.5",
    ]  # fmt: skip


def test_a_typed_command_line_with_extras_parses_back_to_the_same_values() -> None:
    argv = load().spark_submit_argv(
        "sensor_aggregates",
        {"total_cores": "2"},
        options={"checkpoint_dir": "/srv/a dir/with spaces"},
        extra="--trigger '5 seconds' --log-level DEBUG",
        **SUBMIT,
    )
    assert argv[argv.index("--total-executor-cores") + 1] == "2"
    assert argv[-6:] == [
        "--checkpoint-dir",
        "/srv/a dir/with spaces",
        "--trigger",
        "5 seconds",
        "--log-level",
        "DEBUG",
    ]


def _plan(host: str, nodes: dict[str, dict[str, object]], **over: object) -> dict[str, Any]:
    inputs = {
        "host": host,
        "masters": ["m"],
        "workers": ["w1", "w2", "w3"],
        "active_workers": ["w1", "w2"],  # w3 decommissioned
        "nodes": nodes,
        "history": False,
        "ports": PORTS,
        **over,
    }
    return dict(load().spark_plan(inputs))


def test_the_plan_holds_out_a_worker_whose_python_is_not_the_masters() -> None:
    nodes = {h: {**NODE, "python": "3.13"} for h in ("m", "w1", "w2", "w3")}
    nodes["w2"]["python"] = "3.11"
    plan = _plan("w1", nodes)
    assert plan["held_out"] == ["w2"] and plan["serving_workers"] == ["w1"]
    assert plan["is_worker"] and not plan["is_leaving"]
    assert [s["name"] for s in plan["services"]] == ["spark-worker"]
    held = _plan("w2", nodes)
    assert not held["is_worker"] and held["is_leaving"] and held["services"] == []
    leaving = _plan("w3", nodes)
    assert leaving["is_leaving"] and leaving["serving_workers"] == ["w1"]
    assert [s["name"] for s in _plan("m", nodes)["services"]] == ["spark-master"]


def test_without_the_masters_python_no_worker_is_held_out() -> None:
    nodes = {"w1": {**NODE, "python": "3.13"}}
    plan = _plan("w1", nodes)
    assert plan["held_out"] == [] and plan["serving_workers"] == ["w1", "w2"]
    assert _plan("w9", nodes)["services"] == [], "a host whose node was not read runs nothing"
