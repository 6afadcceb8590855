"""The firewall role's filters: a node's nftables rules from the inventory, with the kit's own
service table (roles/firewall/vars/main.yml) and the ports its roles declare."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from pikit import REPO
from pikit.service_ports import role_defaults
from tests.conftest import load_filter_plugin

PIKIT_DEFAULTS = yaml.safe_load((REPO / "roles/pikit/defaults/main.yml").read_text())
GROUPS = {
    "kafka_controller": ["pi-1", "pi-2", "pi-3"],
    "kafka_broker": ["pi-1", "pi-2", "pi-3", "pi-5"],
    "spark_master": ["pi-4"],
    "spark_worker": ["pi-1", "pi-2"],
    "monitoring": ["pi-4"],
    "edge": ["e1", "e2"],
}
HOSTVARS: dict[str, dict[str, Any]] = {
    **{f"pi-{i}": {"ansible_host": f"10.0.0.1{i}"} for i in range(1, 6)},
    "e1": {"ansible_host": "10.0.1.1", "edge_agent_metrics_listen": "10.0.1.1:9108"},
    "e2": {"ansible_host": "10.0.1.2"},
}
CONTROLLER = "10.0.9.9"


def load() -> ModuleType:
    return load_filter_plugin("firewall", "firewall_filters")


def addresses(hostvars: dict[str, Any]) -> dict[str, str]:
    """What the role's `_firewall_addresses` gives: pikit_address of every host."""
    pikit = load_filter_plugin("pikit", "pikit_filters")
    return {host: pikit.pikit_address(host, hostvars) for host in hostvars}


def _rendered(value: Any, context: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return jinja2.Template(value).render(**context) if "{{" in value else value
    if isinstance(value, list):
        return [_rendered(v, context) for v in value]
    if isinstance(value, dict):
        return {k: _rendered(v, context) for k, v in value.items()}
    return value


def kit_services() -> list[dict[str, Any]]:
    raw = yaml.safe_load((REPO / "roles/firewall/vars/main.yml").read_text())
    services: list[dict[str, Any]] = _rendered(raw["_firewall_services"], PIKIT_DEFAULTS)
    return services


def classes(admin: list[str] | None = None, ssh: list[str] | None = None) -> dict[str, Any]:
    return {
        "cluster": {
            "groups": [
                "kafka_controller",
                "kafka_broker",
                "spark_master",
                "spark_worker",
                "monitoring",
            ]
        },
        "kafka": {"groups": ["kafka_controller", "kafka_broker"]},
        "kafka_broker": {"groups": ["kafka_broker"]},
        "spark": {"groups": ["spark_master", "spark_worker"]},
        "edge": {"groups": ["edge"], "ranges": ["192.168.7.0/24"]},
        "monitoring": {"groups": ["monitoring"]},
        "admin": {"ranges": [*(admin or []), CONTROLLER]},
        "ssh": {"ranges": [*(ssh if ssh is not None else ["0.0.0.0/0", "::/0"]), CONTROLLER]},
        "any": {"ranges": ["0.0.0.0/0", "::/0"]},
    }


def plan(host: str, hostvars: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    f = load()
    hv = hostvars or HOSTVARS
    sources = f.firewall_sources(classes(**kwargs), GROUPS, addresses(hv))
    defaults = role_defaults(REPO, ["pikit", "common", "kafka", "spark", "edge_agent", "monitoring"])
    rules: dict[str, Any] = f.firewall_rules(host, hv, GROUPS, kit_services(), sources, defaults)
    return rules


def accepted(result: dict[str, Any]) -> dict[str, list[str]]:
    return {rule["name"]: rule["matches"] for rule in result["accept"]}


def test_a_broker_opens_its_client_port_to_the_cluster_the_devices_and_admin_and_replication_to_brokers() -> (
    None
):
    rules = accepted(plan("pi-5"))
    cluster = "10.0.0.11, 10.0.0.12, 10.0.0.13, 10.0.0.14, 10.0.0.15"
    assert rules["kafka-client"] == [
        f"ip saddr {{ {cluster}, 10.0.1.1, 10.0.1.2, 10.0.9.9, 192.168.7.0/24 }} tcp dport {{ 9092 }}"
    ]
    assert rules["kafka-internal"] == [
        "ip saddr { 10.0.0.11, 10.0.0.12, 10.0.0.13, 10.0.0.15 } tcp dport { 9094 }"
    ]
    assert "kafka-controller" not in rules, "pi-5 is a broker only"
    assert rules["ssh"] == ["tcp dport { 22 }"], "any source, both families, by default"


def test_the_quorum_port_opens_to_kafka_nodes_only_and_is_guarded_before_the_spark_peers() -> None:
    result = plan("pi-1")
    rules = accepted(result)
    assert rules["kafka-controller"] == [
        "ip saddr { 10.0.0.11, 10.0.0.12, 10.0.0.13, 10.0.0.15 } tcp dport { 9093 }"
    ]
    assert {"9092", "9093", "9094", "9404", "9100", "22", "7078", "8081"} <= set(result["guarded"]["tcp"])
    assert [p["name"] for p in result["peers"]] == ["spark-peers"]
    spark_nodes = "10.0.0.11, 10.0.0.12, 10.0.0.14"
    assert result["peers"][0]["matches"] == [f"ip saddr {{ {spark_nodes} }} tcp dport {{ 1-65535 }}"]


def test_a_port_the_host_sets_wins_and_a_port_of_0_opens_nothing() -> None:
    hostvars = {
        **HOSTVARS,
        "pi-5": {"ansible_host": "10.0.0.15", "kafka_sasl_port": 9095, "kafka_metrics_port": 0},
    }
    rules = accepted(plan("pi-5", hostvars))
    assert rules["kafka-sasl"][0].endswith("tcp dport { 9095 }")
    assert "kafka-metrics" not in rules and "kafka-sasl" not in accepted(plan("pi-3"))


def test_the_master_opens_one_ui_port_per_app_and_each_apps_metrics() -> None:
    rules = accepted(plan("pi-4"))
    assert rules["spark-app-ui"] == ["ip saddr { 10.0.9.9 } tcp dport { 4040-4041 }"]
    assert rules["spark-app-metrics"] == ["ip saddr { 10.0.0.14, 10.0.9.9 } tcp dport { 9431, 9432 }"]
    assert rules["prometheus"][0].endswith("tcp dport { 9090 }")


def test_an_agent_on_loopback_opens_no_metrics_port_and_one_on_its_address_does() -> None:
    assert "edge-agent-metrics" not in accepted(plan("e2"))
    assert accepted(plan("e1"))["edge-agent-metrics"] == [
        "ip saddr { 10.0.0.14, 10.0.9.9 } tcp dport { 9108 }"
    ]
    assert "kafka-client" not in accepted(plan("e1"))


def test_an_admin_range_and_ipv6_sources_go_to_their_own_family() -> None:
    rules = accepted(plan("pi-5", ssh=["192.168.1.0/24", "fd00::/64"], admin=["fd00::5"]))
    assert rules["ssh"] == [
        "ip saddr { 10.0.9.9, 192.168.1.0/24 } tcp dport { 22 }",
        "ip6 saddr { fd00::/64 } tcp dport { 22 }",
    ]
    assert rules["kafka-metrics"][-1] == "ip6 saddr { fd00::5 } tcp dport { 9404 }"


def test_a_host_known_by_name_only_is_refused_naming_it() -> None:
    hostvars = {**HOSTVARS, "pi-5": {"ansible_host": "pi-5.lan"}}
    with pytest.raises(AnsibleFilterError, match=re.escape("address of host pi-5 is 'pi-5.lan'")):
        plan("pi-1", hostvars)


def test_a_source_range_that_is_no_range_names_its_variable() -> None:
    f = load()
    spec = {"edge": {"groups": [], "ranges": ["devices.lan"], "var": "firewall_edge_sources"}}
    with pytest.raises(AnsibleFilterError, match="firewall_edge_sources"):
        f.firewall_sources(spec, GROUPS, addresses(HOSTVARS))
