"""The pikit role's filter plugins, shared by every role of the kit."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from pikit import site_model
from tests.conftest import load_filter_plugin


def load() -> ModuleType:
    return load_filter_plugin("pikit", "pikit_filters")


HOSTVARS = {
    "k1": {"node_ip": "10.0.0.1", "ansible_host": "127.0.0.1"},
    "k2": {"ansible_host": "pi-2"},
    "k3": {},
}


def test_the_address_is_node_ip_else_ansible_host_else_the_name() -> None:
    assert [site_model.address(h, HOSTVARS) for h in ("k1", "k2", "k3")] == ["10.0.0.1", "pi-2", "k3"]


def test_a_roles_default_address_comes_from_the_inventory_and_the_model_agrees() -> None:
    """The roles' defaults bind and advertise at pikit_address, which needs no model; the model
    then lists every service at the same address."""
    told = {"_kafka_site": {"services": {"kafka-client": 9092}}}
    hostvars = {host: {**facts, **told} for host, facts in HOSTVARS.items()}
    site = load().pikit_site_model({"all": ["k1", "k2", "k3"]}, hostvars)
    addresses = [load().pikit_address(host, HOSTVARS) for host in ("k1", "k2", "k3")]
    assert addresses == ["10.0.0.1", "pi-2", "k3"]
    endpoints = load().pikit_endpoints(site, "kafka-client", ["k1", "k2", "k3"])
    assert endpoints == [f"{address}:9092" for address in addresses]


def test_a_bootstrap_list_comes_from_the_site_model_and_a_missing_service_is_a_filter_error() -> None:
    from ansible.errors import AnsibleFilterError

    told = {"_kafka_site": {"services": {"kafka-client": 9092}}}
    hostvars = {host: {**facts, **told} for host, facts in HOSTVARS.items()}
    site = load().pikit_site_model({"all": ["k1", "k2", "k3"]}, hostvars)
    assert load().pikit_endpoints(site, "kafka-client", ["k1", "k2"]) == ["10.0.0.1:9092", "pi-2:9092"]
    assert site_model.service_ports(site, "kafka-client", "k3") == [9092]
    with pytest.raises(
        AnsibleFilterError, match="site model: the site model has no service 'ssh' on host k1"
    ):
        load().pikit_endpoints(site, "ssh", ["k1"])


def test_device_signing_keys_are_the_agents_own_derivation() -> None:
    from pikit_contract.signing import device_key

    keys = load().pikit_device_signing_keys("s3cret", ["edge-2", "edge-1", "edge-2"])
    assert list(keys) == ["edge-1", "edge-2"]
    assert keys["edge-1"] == device_key(b"s3cret", "edge-1").hex() != keys["edge-2"]


def test_the_keyring_holds_every_key_and_only_the_fences_already_set(tmp_path: Path) -> None:
    from pikit_contract.signing import Keyring, device_key

    from pikit import revocation

    record = tmp_path / "revoked-devices.json"
    assert load().pikit_revocations(str(record)) == {}  # none made yet
    revocation.revoke(record, "edge-2", None)
    revocation.revoke(record, "edge-3", None)
    revocation.set_fence(record, "edge-2", {"0": 10, "1": 7})
    revoked = load().pikit_revocations(str(record))
    assert revoked["edge-2"]["fence"] == {"0": 10, "1": 7}
    assert revoked["edge-3"]["fence"] is None
    ring = Keyring.from_json(load().pikit_device_keyring("s3cret", ["edge-1", "edge-2"], revoked))
    # edge-3 is no host any more: its key stays for what it wrote before it was revoked.
    assert sorted(ring.keys) == ["edge-1", "edge-2", "edge-3"]
    assert ring.keys["edge-2"] == device_key(b"s3cret", "edge-2")
    assert ring.revoked == {"edge-2": {0: 10, 1: 7}}  # edge-3's fence is pending: the brokers' deny only


def test_packages_missing_are_those_dpkg_does_not_list_as_installed() -> None:
    missing = load().pikit_packages_missing
    listing = {
        "stdout_lines": ["ii  nftables", "ii  chrony", "rc  prometheus", "iU  openjdk-17-jre-headless"]
    }
    assert missing(["nftables", "prometheus", "chrony"], listing) == ["prometheus"], (
        "removed, config left: missing"
    )
    assert missing(["openjdk-17-jre-headless"], listing) == ["openjdk-17-jre-headless"], (
        "unpacked only: missing"
    )
    assert missing(["nftables"], listing) == []
    assert missing(["nftables", "chrony"], {}) == ["nftables", "chrony"], "no listing: apt decides"
    assert missing(["nftables"], None) == ["nftables"]


def test_artifacts_missing_are_those_absent_from_any_listing() -> None:
    missing = load().pikit_artifacts_missing
    artifacts = ["spark/pyspark-4.2.0.whl", "spark/connector.tgz", "agent/kafka_python.whl"]
    full = {"files": [{"path": "/opt/spark/dist/" + a.split("/")[1]} for a in artifacts]}
    partial = {"files": [{"path": "/opt/spark/dist/connector.tgz"}, {"path": "/opt/spark/current"}]}
    assert missing(artifacts, [full]) == []
    assert missing(artifacts, [partial]) == ["spark/pyspark-4.2.0.whl", "agent/kafka_python.whl"]
    assert missing(artifacts, [full, partial]) == ["spark/pyspark-4.2.0.whl", "agent/kafka_python.whl"]
    assert missing(artifacts, [{"files": []}]) == artifacts
    assert missing(artifacts, []) == []


def test_shared_addresses_name_the_hosts_that_share_each() -> None:
    shared = load().pikit_shared_addresses(
        {"pi-1": "10.0.0.1", "pi-2": "10.0.0.2", "pi-3": "10.0.0.1", "pi-4": "10.0.0.4", "pi-5": "10.0.0.4"}
    )
    assert shared == ["pi-1, pi-3 share 10.0.0.1", "pi-4, pi-5 share 10.0.0.4"]
    assert load().pikit_shared_addresses({"pi-1": "10.0.0.1", "pi-2": "10.0.0.2"}) == []
