"""The site model (pikit/site_model.py): endpoints as the roles declare them, the model gathered
from what each role told of its hosts, and the questions the roles and tools ask of it."""

from __future__ import annotations

from typing import Any

import pytest

from pikit.site_model import (
    SiteModelError,
    driver_pis,
    endpoints,
    service_endpoints,
    service_ports,
    site_model,
)


@pytest.mark.parametrize(
    ("declared", "found"),
    [
        (9092, [{"port": 9092, "address": None}]),
        ("9092", [{"port": 9092, "address": None}]),
        (0, []),
        ("", []),
        (None, []),
        ("127.0.0.1:9108", []),
        ("localhost:9108", []),
        ("0.0.0.0:9108", [{"port": 9108, "address": None}]),
        (":9108", [{"port": 9108, "address": None}]),
        ("10.0.1.1:9108", [{"port": 9108, "address": "10.0.1.1"}]),
        ({"port": 9404, "address": "pi-1.lan"}, [{"port": 9404, "address": "pi-1.lan"}]),
        ({"port": 0, "address": "pi-1.lan"}, []),
        ([9431, 0, 9432], [{"port": 9431, "address": None}, {"port": 9432, "address": None}]),
    ],
)
def test_an_endpoint_is_read_the_ways_a_role_declares_it(declared: Any, found: list[dict[str, Any]]) -> None:
    assert endpoints(declared, "here") == found


@pytest.mark.parametrize("declared", ["ninety", "10.0.0.1:port", 70000, {"address": "x"}])
def test_a_declared_port_that_is_no_port_is_named(declared: Any) -> None:
    with pytest.raises(SiteModelError, match="host pi-1: service kafka-client"):
        endpoints(declared, "host pi-1: service kafka-client")


GROUPS = {
    "all": ["pi-1", "pi-2", "e1"],
    "kafka_controller": ["pi-1"],
    "kafka_broker": ["pi-1", "pi-2"],
    "edge": ["e1"],
    "site_own": ["pi-2"],
}
HOSTVARS: dict[str, dict[str, Any]] = {
    "pi-1": {
        "node_ip": "10.0.0.1",
        "ansible_host": "127.0.0.1",
        "_pikit_site": {"services": {"ssh": 22}, "settings": {"pikit_readings_topic": "r"}},
        "_kafka_site": {
            "services": {"kafka-client": {"port": 9092, "address": "broker-1.lan"}, "kafka-controller": 9093},
            "settings": {"kafka_max_quorum_lag": 1000},
        },
    },
    "pi-2": {
        "ansible_host": "10.0.0.2",
        "_pikit_site": {"services": {"ssh": 2222}, "settings": {"pikit_readings_topic": "r"}},
        "_kafka_site": {"services": {"kafka-client": 9092, "kafka-controller": 0}},
    },
    "e1": {"_pikit_site": {"services": {"ssh": 22}}},
}


def test_the_model_holds_each_hosts_address_groups_and_what_its_roles_told() -> None:
    model = site_model(GROUPS, HOSTVARS, "greenhouse")
    assert model["cluster"] == "greenhouse"
    assert model["groups"]["kafka_broker"] == ["pi-1", "pi-2"] and model["groups"]["spark_master"] == []
    assert "site_own" not in model["groups"], "the kit's groups only"
    pi1, pi2, e1 = (model["hosts"][h] for h in ("pi-1", "pi-2", "e1"))
    assert (pi1["address"], pi2["address"], e1["address"]) == ("10.0.0.1", "10.0.0.2", "e1")
    assert pi1["groups"] == ["kafka_broker", "kafka_controller"] and pi2["groups"] == ["kafka_broker"]
    assert pi1["services"]["kafka-client"] == [{"port": 9092, "address": "broker-1.lan"}]
    assert pi1["services"]["kafka-controller"] == [{"port": 9093, "address": "10.0.0.1"}]
    assert pi2["services"]["kafka-controller"] == [] and pi2["services"]["ssh"][0]["port"] == 2222
    assert pi1["told"] == ["pikit", "kafka"] and e1["told"] == ["pikit"]
    assert model["settings"] == {"pikit_readings_topic": "r", "kafka_max_quorum_lag": 1000}


def test_bootstrap_lists_and_ports_come_from_the_model() -> None:
    model = site_model(GROUPS, HOSTVARS)
    assert service_endpoints(model, "kafka-client", ["pi-2", "pi-1"]) == [
        "10.0.0.2:9092",
        "broker-1.lan:9092",
    ]
    assert service_endpoints(model, "kafka-controller", ["pi-1", "pi-2"]) == ["10.0.0.1:9093"]
    assert service_ports(model, "ssh", "pi-2") == [2222]


def test_a_service_no_role_told_names_the_roles_that_did_not_tell() -> None:
    model = site_model(GROUPS, HOSTVARS)
    with pytest.raises(
        SiteModelError, match=r"no service 'node-exporter' on host e1 \(roles common, edge_agent"
    ):
        service_ports(model, "node-exporter", "e1")
    with pytest.raises(SiteModelError, match="host pi-9 is not in the site model"):
        service_ports(model, "ssh", "pi-9")


def test_the_drivers_are_spark_driver_in_its_order_else_the_masters_pi() -> None:
    ranked = {"spark_driver": ["pi-3", "pi-2"], "spark_master": ["pi-4"]}
    assert driver_pis(ranked) == ["pi-3", "pi-2"]
    assert driver_pis({"spark_driver": [], "spark_master": ["pi-4"]}) == ["pi-4"]
    assert driver_pis({"kafka_broker": ["pi-1"]}) == []
