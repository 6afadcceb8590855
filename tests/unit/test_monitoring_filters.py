"""The monitoring role's filter: Prometheus's scrape jobs from the inventory."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from pikit import REPO
from pikit.service_ports import role_defaults
from tests.conftest import load_filter_plugin


def load() -> ModuleType:
    return load_filter_plugin("monitoring", "monitoring_filters")


def addresses(hostvars: dict[str, Any]) -> dict[str, str]:
    """What the role's `_monitoring_addresses` gives: pikit_address of every host."""
    pikit = load_filter_plugin("pikit", "pikit_filters")
    return {host: pikit.pikit_address(host, hostvars) for host in hostvars}


GROUPS = {
    "kafka_broker": ["pi-2", "pi-1"],
    "kafka_controller": ["pi-1"],
    "spark_master": ["pi-4"],
    "edge": ["e1", "e2"],
}
HOSTVARS: dict[str, dict[str, Any]] = {
    "pi-1": {"ansible_host": "10.0.0.11"},
    "pi-2": {"ansible_host": "pi-2.lan", "node_ip": "10.0.0.12", "kafka_metrics_port": 9999},
    "pi-4": {"ansible_host": "10.0.0.14"},
    "e1": {"ansible_host": "10.0.1.1", "edge_agent_metrics_listen": "0.0.0.0:9108"},
    "e2": {"ansible_host": "10.0.1.2"},
}


def test_each_host_is_one_target_labelled_with_its_inventory_name_at_its_own_port() -> None:
    jobs = [
        {
            "name": "kafka",
            "groups": ["kafka_controller", "kafka_broker"],
            "port": 9404,
            "port_var": "kafka_metrics_port",
        }
    ]
    assert load().monitoring_scrape_configs(jobs, GROUPS, HOSTVARS, addresses(HOSTVARS)) == [
        {
            "job_name": "kafka",
            "metrics_path": "/metrics",
            "static_configs": [
                {"targets": ["10.0.0.11:9404"], "labels": {"host": "pi-1"}},
                {"targets": ["10.0.0.12:9999"], "labels": {"host": "pi-2"}},
            ],
        }
    ]


def test_port_0_leaves_a_host_out_and_a_job_without_targets_is_left_out() -> None:
    hostvars = {**HOSTVARS, "pi-2": {**HOSTVARS["pi-2"], "kafka_metrics_port": 0}}
    jobs = [
        {"name": "kafka", "groups": ["kafka_broker"], "port": 9404, "port_var": "kafka_metrics_port"},
        {"name": "spark_worker", "groups": ["spark_worker"], "port": 8081},
    ]
    configs = load().monitoring_scrape_configs(jobs, GROUPS, hostvars, addresses(hostvars))
    assert [(c["job_name"], [s["labels"]["host"] for s in c["static_configs"]]) for c in configs] == [
        ("kafka", ["pi-1"])
    ]


def test_several_ports_and_a_path() -> None:
    jobs = [{"name": "spark_apps", "groups": ["spark_master"], "ports": [9431, 9432], "path": "/m"}]
    [config] = load().monitoring_scrape_configs(jobs, GROUPS, HOSTVARS, addresses(HOSTVARS))
    assert config["metrics_path"] == "/m"
    assert config["static_configs"] == [
        {"targets": ["10.0.0.14:9431", "10.0.0.14:9432"], "labels": {"host": "pi-4"}}
    ]


def test_a_listen_address_on_loopback_is_not_scraped_and_any_address_means_the_hosts() -> None:
    jobs = [
        {
            "name": "edge_agent",
            "groups": ["edge"],
            "listen_var": "edge_agent_metrics_listen",
            "listen": "127.0.0.1:9108",
        }
    ]
    [config] = load().monitoring_scrape_configs(jobs, GROUPS, HOSTVARS, addresses(HOSTVARS))
    assert config["static_configs"] == [{"targets": ["10.0.1.1:9108"], "labels": {"host": "e1"}}]
    hostvars = {**HOSTVARS, "e2": {**HOSTVARS["e2"], "edge_agent_metrics_listen": "10.0.1.2:9200"}}
    [config] = load().monitoring_scrape_configs(jobs, GROUPS, hostvars, addresses(hostvars))
    assert [s["targets"] for s in config["static_configs"]] == [["10.0.1.1:9108"], ["10.0.1.2:9200"]]
    hostvars = {**HOSTVARS, "e1": {"ansible_host": "10.0.1.1", "edge_agent_metrics_listen": ""}}
    assert load().monitoring_scrape_configs(jobs, GROUPS, hostvars, addresses(hostvars)) == []


def kit_jobs() -> list[dict[str, Any]]:
    """The role's own monitoring_jobs, as its defaults write them."""
    text = (REPO / "roles/monitoring/defaults/main.yml").read_text()
    rendered = jinja2.Template(text).render()
    return list(yaml.safe_load(rendered)["monitoring_jobs"])


def test_the_kit_jobs_read_each_port_from_the_serving_roles_defaults_unless_the_host_sets_it() -> None:
    defaults = role_defaults(REPO, ["common", "kafka", "spark", "edge_agent"])
    configs = load().monitoring_scrape_configs(kit_jobs(), GROUPS, HOSTVARS, addresses(HOSTVARS), defaults)
    assert {c["job_name"]: [t for s in c["static_configs"] for t in s["targets"]] for c in configs} == {
        "node": ["10.0.1.1:9100", "10.0.1.2:9100", "10.0.0.11:9100", "10.0.0.12:9100", "10.0.0.14:9100"],
        "kafka": ["10.0.0.11:9404", "10.0.0.12:9999"],
        "spark_master": ["10.0.0.14:8080"],
        "spark_apps": ["10.0.0.14:9431", "10.0.0.14:9432"],
        "edge_agent": ["10.0.1.1:9108"],
    }


def test_the_apps_scraped_are_the_site_apps_at_their_own_ports() -> None:
    defaults = role_defaults(REPO, ["common", "kafka", "spark", "edge_agent"])
    apps = dict(defaults["spark"]["spark_apps"])
    apps["anomaly_alerts"] = {**apps["anomaly_alerts"], "metrics_port": 9500}
    hostvars = {**HOSTVARS, "pi-4": {**HOSTVARS["pi-4"], "spark_apps": apps}}
    jobs = [job for job in kit_jobs() if job["name"] == "spark_apps"]
    [config] = load().monitoring_scrape_configs(jobs, GROUPS, hostvars, addresses(hostvars), defaults)
    assert config["static_configs"][0]["targets"] == ["10.0.0.14:9431", "10.0.0.14:9500"]
    hostvars["pi-4"]["spark_site_apps"] = ["sensor_aggregates"]
    [config] = load().monitoring_scrape_configs(jobs, GROUPS, hostvars, addresses(hostvars), defaults)
    assert config["static_configs"][0]["targets"] == ["10.0.0.14:9431"]


def test_a_port_variable_nobody_declares_is_named() -> None:
    jobs = [{"name": "mine", "groups": ["spark_master"], "port_var": "my_exporter_port"}]
    with pytest.raises(AnsibleFilterError, match="job 'mine': no role declares 'my_exporter_port'"):
        load().monitoring_scrape_configs(jobs, GROUPS, HOSTVARS, addresses(HOSTVARS), {})
