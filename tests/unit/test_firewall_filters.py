"""The firewall role's filters: a node's nftables rules from the inventory, with the kit's own
service table (roles/firewall/vars/main.yml) and the ports its roles declare."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from pikit import REPO
from tests.conftest import inventory_of, load_filter_plugin, preflight_site_model

GROUPS = {
    "kafka_controller": ["pi-1", "pi-2", "pi-3"],
    "kafka_broker": ["pi-1", "pi-2", "pi-3", "pi-5"],
    "kafka_connect": ["pi-4", "pi-5"],
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


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The site model the preflight builds for GROUPS and HOSTVARS, with the roles' own ports."""
    return preflight_site_model(tmp_path_factory.mktemp("site"), inventory_of(GROUPS, HOSTVARS))


def load() -> ModuleType:
    return load_filter_plugin("firewall", "firewall_filters")


def kit_services() -> list[dict[str, Any]]:
    services: list[dict[str, Any]] = yaml.safe_load((REPO / "roles/firewall/vars/main.yml").read_text())[
        "_firewall_services"
    ]
    return services


def classes(
    admin: list[str] | None = None, ssh: list[str] | None = None, mirror: list[str] | None = None
) -> dict[str, Any]:
    return {
        "cluster": {
            "groups": [
                "kafka_controller",
                "kafka_broker",
                "kafka_connect",
                "spark_master",
                "spark_worker",
                "spark_driver",
                "monitoring",
            ]
        },
        "connect": {"groups": ["kafka_connect"]},
        "kafka": {"groups": ["kafka_controller", "kafka_broker"]},
        "kafka_broker": {"groups": ["kafka_broker"]},
        "spark": {"groups": ["spark_master", "spark_worker", "spark_driver"]},
        "edge": {"groups": ["edge"], "ranges": ["192.168.7.0/24"]},
        "mirror": {"ranges": mirror or []},
        "monitoring": {"groups": ["monitoring"]},
        "admin": {"ranges": [*(admin or []), CONTROLLER]},
        "ssh": {"ranges": [*(ssh if ssh is not None else ["0.0.0.0/0", "::/0"]), CONTROLLER]},
        "any": {"ranges": ["0.0.0.0/0", "::/0"]},
    }


def plan(host: str, site: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    f = load()
    # The groups as the play sees them: the preflight put the master in spark_driver, which GROUPS lacks.
    groups = {**GROUPS, "spark_driver": site["groups"]["spark_driver"]}
    sources = f.firewall_sources(classes(**kwargs), groups, site)
    rules: dict[str, Any] = f.firewall_rules(host, site, groups, kit_services(), sources)
    return rules


def accepted(result: dict[str, Any]) -> dict[str, list[str]]:
    return {rule["name"]: rule["matches"] for rule in result["accept"]}


def test_a_broker_opens_its_client_port_to_the_cluster_the_devices_and_admin_and_replication_to_brokers(
    site: dict[str, Any],
) -> None:
    rules = accepted(plan("pi-5", site))
    cluster = "10.0.0.11, 10.0.0.12, 10.0.0.13, 10.0.0.14, 10.0.0.15"
    assert rules["kafka-client"] == [
        f"ip saddr {{ {cluster}, 10.0.1.1, 10.0.1.2, 10.0.9.9, 192.168.7.0/24 }} tcp dport {{ 9092 }}"
    ]
    assert rules["kafka-internal"] == [
        "ip saddr { 10.0.0.11, 10.0.0.12, 10.0.0.13, 10.0.0.15 } tcp dport { 9094 }"
    ]
    assert "kafka-controller" not in rules, "pi-5 is a broker only"
    assert rules["ssh"] == ["tcp dport { 22 }"], "any source, both families, by default"


def test_a_core_opens_its_client_port_and_nothing_else_to_the_mirroring_sites_workers(
    site: dict[str, Any],
) -> None:
    rules = accepted(plan("pi-5", site, mirror=["172.16.5.0/24"]))
    assert "172.16.5.0/24" in rules["kafka-client"][0]
    opened = [name for name, matches in rules.items() if "172.16.5.0/24" in " ".join(matches)]
    assert opened == ["kafka-client"]


def test_the_quorum_port_opens_to_kafka_nodes_only_and_is_guarded_before_the_spark_peers(
    site: dict[str, Any],
) -> None:
    result = plan("pi-1", site)
    rules = accepted(result)
    assert rules["kafka-controller"] == [
        "ip saddr { 10.0.0.11, 10.0.0.12, 10.0.0.13, 10.0.0.15 } tcp dport { 9093 }"
    ]
    assert {"9092", "9093", "9094", "9404", "9100", "22", "7078", "8081"} <= set(result["guarded"]["tcp"])
    assert [p["name"] for p in result["peers"]] == ["spark-peers"]
    spark_nodes = "10.0.0.11, 10.0.0.12, 10.0.0.14"
    assert result["peers"][0]["matches"] == [f"ip saddr {{ {spark_nodes} }} tcp dport {{ 1-65535 }}"]


def test_a_port_the_host_sets_wins_and_a_port_of_0_opens_nothing(
    site: dict[str, Any], tmp_path: Path
) -> None:
    hostvars = {
        **HOSTVARS,
        "pi-5": {"ansible_host": "10.0.0.15", "kafka_sasl_port": 9095, "kafka_metrics_port": 0},
    }
    own = preflight_site_model(tmp_path, inventory_of(GROUPS, hostvars))
    rules = accepted(plan("pi-5", own))
    assert rules["kafka-sasl"][0].endswith("tcp dport { 9095 }")
    assert "kafka-metrics" not in rules and "kafka-sasl" not in accepted(plan("pi-3", site))


def test_the_master_opens_one_ui_port_per_app_and_each_apps_metrics(site: dict[str, Any]) -> None:
    rules = accepted(plan("pi-4", site))
    assert rules["spark-app-ui"] == ["ip saddr { 10.0.9.9 } tcp dport { 4040-4041 }"]
    assert rules["spark-app-metrics"] == ["ip saddr { 10.0.0.14, 10.0.9.9 } tcp dport { 9431, 9432 }"]
    assert rules["prometheus"][0].endswith("tcp dport { 9090 }")


def test_connects_rest_api_opens_to_the_workers_and_admin_only(site: dict[str, Any]) -> None:
    assert accepted(plan("pi-5", site))["connect-rest"] == [
        "ip saddr { 10.0.0.14, 10.0.0.15, 10.0.9.9 } tcp dport { 8083 }"
    ]
    assert "connect-rest" not in accepted(plan("pi-1", site))


def test_an_agent_on_loopback_opens_no_metrics_port_and_one_on_its_address_does(site: dict[str, Any]) -> None:
    assert "edge-agent-metrics" not in accepted(plan("e2", site))
    assert accepted(plan("e1", site))["edge-agent-metrics"] == [
        "ip saddr { 10.0.0.14, 10.0.9.9 } tcp dport { 9108 }"
    ]
    assert "kafka-client" not in accepted(plan("e1", site))


def test_an_admin_range_and_ipv6_sources_go_to_their_own_family(site: dict[str, Any]) -> None:
    rules = accepted(plan("pi-5", site, ssh=["192.168.1.0/24", "fd00::/64"], admin=["fd00::5"]))
    assert rules["ssh"] == [
        "ip saddr { 10.0.9.9, 192.168.1.0/24 } tcp dport { 22 }",
        "ip6 saddr { fd00::/64 } tcp dport { 22 }",
    ]
    assert rules["kafka-metrics"][-1] == "ip6 saddr { fd00::5 } tcp dport { 9404 }"


def test_a_host_known_by_name_only_is_refused_naming_it(site: dict[str, Any]) -> None:
    named = {**site, "hosts": {**site["hosts"], "pi-5": {**site["hosts"]["pi-5"], "address": "pi-5.lan"}}}
    with pytest.raises(AnsibleFilterError, match=re.escape("address of host pi-5 is 'pi-5.lan'")):
        plan("pi-1", named)


def test_a_source_range_that_is_no_range_names_its_variable(site: dict[str, Any]) -> None:
    f = load()
    spec = {"edge": {"groups": [], "ranges": ["devices.lan"], "var": "firewall_edge_sources"}}
    with pytest.raises(AnsibleFilterError, match="firewall_edge_sources"):
        f.firewall_sources(spec, GROUPS, site)


def test_a_service_of_the_sites_own_opens_its_literal_ports_and_a_kit_service_the_model_lacks_is_named(
    site: dict[str, Any],
) -> None:
    f = load()
    mine = [{"name": "mqtt", "groups": ["spark_master"], "ports": [1883, 8883], "from": ["edge"]}]
    sources = f.firewall_sources(classes(), GROUPS, site)
    rules = accepted(f.firewall_rules("pi-4", site, GROUPS, mine, sources))
    assert rules["mqtt"] == ["ip saddr { 10.0.1.1, 10.0.1.2, 192.168.7.0/24 } tcp dport { 1883, 8883 }"]
    unknown = [{"name": "x", "groups": ["edge"], "service": "mqtt-broker", "from": ["edge"]}]
    with pytest.raises(
        AnsibleFilterError, match="firewall: service 'x': the site model has no service 'mqtt-broker'"
    ):
        f.firewall_rules("e1", site, GROUPS, unknown, sources)


def test_every_service_the_firewall_opens_is_one_some_role_tells_the_model(site: dict[str, Any]) -> None:
    told = {name for host in site["hosts"].values() for name in host["services"]}
    assert {s["service"] for s in kit_services() if "service" in s} <= told
