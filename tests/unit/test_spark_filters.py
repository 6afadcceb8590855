"""The spark role's filter plugins."""

from __future__ import annotations

from types import ModuleType

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
