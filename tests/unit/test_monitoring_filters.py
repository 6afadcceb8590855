"""The monitoring role's filter: Prometheus's scrape jobs from the site model."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from pikit import REPO
from tests.conftest import inventory_of, load_filter_plugin, preflight_site_model


def load() -> ModuleType:
    return load_filter_plugin("monitoring", "monitoring_filters")


GROUPS = {
    "kafka_broker": ["pi-2", "pi-1"],
    "kafka_controller": ["pi-1"],
    "spark_master": ["pi-4"],
    "spark_worker": ["pi-1"],
    "spark_driver": ["pi-4"],
    "edge": ["e1", "e2"],
}
HOSTVARS: dict[str, dict[str, Any]] = {
    "pi-1": {"ansible_host": "10.0.0.11"},
    "pi-2": {"ansible_host": "pi-2.lan", "node_ip": "10.0.0.12", "kafka_metrics_port": 9999},
    "pi-4": {"ansible_host": "10.0.0.14"},
    "e1": {"ansible_host": "10.0.1.1", "edge_agent_metrics_listen": "0.0.0.0:9108"},
    "e2": {"ansible_host": "10.0.1.2"},
}


def model(tmp_path: Path, hostvars: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    return preflight_site_model(tmp_path, inventory_of(GROUPS, hostvars or HOSTVARS))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The site model the preflight builds for GROUPS and HOSTVARS, with the roles' own ports."""
    return model(tmp_path_factory.mktemp("site"))


def kit_jobs() -> list[dict[str, Any]]:
    """The role's own monitoring_jobs, as its defaults write them."""
    return list(yaml.safe_load((REPO / "roles/monitoring/defaults/main.yml").read_text())["monitoring_jobs"])


def targets(configs: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {c["job_name"]: [t for s in c["static_configs"] for t in s["targets"]] for c in configs}


def test_each_host_is_one_target_labelled_with_its_inventory_name_at_its_own_port(
    site: dict[str, Any],
) -> None:
    jobs = [{"name": "kafka", "groups": ["kafka_controller", "kafka_broker"], "service": "kafka-metrics"}]
    assert load().monitoring_scrape_configs(jobs, GROUPS, site) == [
        {
            "job_name": "kafka",
            "metrics_path": "/metrics",
            "static_configs": [
                {"targets": ["10.0.0.11:9404"], "labels": {"host": "pi-1"}},
                {"targets": ["10.0.0.12:9999"], "labels": {"host": "pi-2"}},
            ],
        }
    ]


def test_a_host_without_an_endpoint_is_left_out_and_a_job_without_targets_is_left_out(
    site: dict[str, Any],
) -> None:
    """pi-2's exporter off (kafka_metrics_port 0: the kafka role tells no endpoint)."""
    hosts = {**site["hosts"], "pi-2": {**site["hosts"]["pi-2"]}}
    hosts["pi-2"]["services"] = {**hosts["pi-2"]["services"], "kafka-metrics": []}
    jobs = [
        {"name": "kafka", "groups": ["kafka_broker"], "service": "kafka-metrics"},
        {"name": "mine", "groups": ["monitoring"], "port": 8081},
    ]
    configs = load().monitoring_scrape_configs(jobs, GROUPS, {**site, "hosts": hosts})
    assert [(c["job_name"], [s["labels"]["host"] for s in c["static_configs"]]) for c in configs] == [
        ("kafka", ["pi-1"])
    ]


def test_literal_ports_of_a_job_of_the_sites_own_and_a_path(site: dict[str, Any]) -> None:
    jobs = [{"name": "mine", "groups": ["spark_master"], "ports": [9500, 9501], "path": "/m"}]
    [config] = load().monitoring_scrape_configs(jobs, GROUPS, site)
    assert config["metrics_path"] == "/m"
    assert config["static_configs"] == [
        {"targets": ["10.0.0.14:9500", "10.0.0.14:9501"], "labels": {"host": "pi-4"}}
    ]


def test_the_kit_jobs_scrape_each_service_where_the_roles_told_it_runs(site: dict[str, Any]) -> None:
    """An agent on a wildcard address is scraped at the host's; one on loopback (e2) is not."""
    assert targets(load().monitoring_scrape_configs(kit_jobs(), GROUPS, site)) == {
        "node": ["10.0.1.1:9100", "10.0.1.2:9100", "10.0.0.11:9100", "10.0.0.12:9100", "10.0.0.14:9100"],
        "kafka": ["10.0.0.11:9404", "10.0.0.12:9999"],
        "spark_master": ["10.0.0.14:8080"],
        "spark_worker": ["10.0.0.11:8081"],
        "spark_apps": ["10.0.0.14:9431", "10.0.0.14:9432"],
        "edge_agent": ["10.0.1.1:9108"],
    }


def test_the_apps_scraped_are_the_site_apps_at_their_own_ports(tmp_path: Path) -> None:
    spark = yaml.safe_load((REPO / "roles/spark/defaults/main.yml").read_text())
    apps = {name: {**app, "options": {}} for name, app in spark["spark_apps"].items()}
    apps["anomaly_alerts"]["metrics_port"] = 9500
    hostvars = {
        **HOSTVARS,
        "pi-4": {**HOSTVARS["pi-4"], "spark_apps": apps, "spark_site_apps": ["anomaly_alerts"]},
    }
    jobs = [job for job in kit_jobs() if job["name"] == "spark_apps"]
    [config] = load().monitoring_scrape_configs(jobs, GROUPS, model(tmp_path, hostvars))
    assert config["static_configs"][0]["targets"] == ["10.0.0.14:9500"]


def test_a_service_the_model_does_not_know_is_named(site: dict[str, Any]) -> None:
    jobs = [{"name": "mine", "groups": ["spark_master"], "service": "my-exporter"}]
    with pytest.raises(
        AnsibleFilterError, match="job 'mine': the site model has no service 'my-exporter' on host pi-4"
    ):
        load().monitoring_scrape_configs(jobs, GROUPS, site)
