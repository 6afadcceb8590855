"""The common role on every node of the scenario (testinfra, run by molecule verify)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pikit_testkit.molecule_lab import Node

from pikit import REPO
from pikit.prometheus import Sample, scrape, value, values

# What the role's interface says (its defaults; the lab's inventory keeps them).
_DEFAULTS = yaml.safe_load((REPO / "roles/common/defaults/main.yml").read_text())
JVM_GROUPS = set(_DEFAULTS["common_java_groups"])
USER_GROUPS = {user["name"]: set(user["groups"]) for user in _DEFAULTS["common_service_users"]}


# Raspberry Pi OS's Java, by Debian release: Bookworm (12) 17, Trixie (13) 21.
JAVA_BY_RELEASE = {"12": "17", "13": "21"}


def test_java_only_on_jvm_nodes(host: Any, node: Node) -> None:
    java_major = JAVA_BY_RELEASE[host.system_info.release.split(".")[0]]
    java = host.run("java -version")
    if node.groups & JVM_GROUPS:
        assert java.rc == 0, java.stderr
        assert f'version "{java_major}.' in java.stderr
    else:
        assert java.rc != 0
        assert not host.package(f"openjdk-{java_major}-jre-headless").is_installed


@pytest.mark.parametrize("user", sorted(USER_GROUPS))
def test_service_user_and_data_dir(host: Any, node: Node, user: str) -> None:
    wanted = bool(node.groups & USER_GROUPS[user])
    assert host.user(user).exists == wanted
    data = host.file(f"/srv/pikit/{user}")
    assert data.exists == wanted
    if wanted:
        assert data.is_directory
        assert data.user == user
        assert data.mode == 0o750
        assert host.user(user).shell == "/usr/sbin/nologin"
        limits = host.file("/etc/security/limits.d/90-pikit.conf").content_string
        assert f"{user}\thard\tnofile\t20000" in limits


def test_etc_hosts_lists_every_node(host: Any, nodes: list[Node]) -> None:
    hosts = host.file("/etc/hosts").content_string
    assert "127.0.0.1\tlocalhost" in hosts
    for other in nodes:
        assert f"{other.address}\t{other.name}" in hosts
        addresses = host.addr(other.name).ip_addresses
        assert addresses == [other.address] or other.address in addresses


def test_chrony_running_without_clock_control(host: Any) -> None:
    chrony = host.service("chrony")
    assert chrony.is_running
    assert chrony.is_enabled
    assert any("-x" in proc.args.split() for proc in host.process.filter(comm="chronyd"))


def test_sysctl_file_written_not_applied(host: Any) -> None:
    conf = host.file("/etc/sysctl.d/90-pikit.conf").content_string
    assert "vm.swappiness=1" in conf
    assert "vm.max_map_count=262144" in conf
    assert "-net.ipv4.tcp_rto_max_ms=10000" in conf.splitlines(), "set where the kernel has it"


def test_tcp_backoff_capped_in_the_nodes_network_namespace(host: Any) -> None:
    """The lab gives each node what its sysctl file asks of a Pi's kernel, where the kernel has
    the key (Linux 6.15+); where it does not, the node runs with the kernel's own 120 s."""
    knob = host.file("/proc/sys/net/ipv4/tcp_rto_max_ms")
    if Path("/proc/sys/net/ipv4/tcp_rto_max_ms").exists():
        assert knob.content_string.strip() == "10000"
    else:
        assert not knob.exists


def test_ssh_password_logins_off(host: Any) -> None:
    effective = host.run("sshd -T").stdout
    assert "passwordauthentication no" in effective
    assert "permitrootlogin without-password" in effective
    assert "maxauthtries 3" in effective
    assert "allowusers pi" in effective  # common_ssh_allow_users in the lab


def _node_metrics(node: Node) -> list[Sample]:
    return scrape(f"http://{node.address}:9100/metrics", timeout=20)


def test_node_exporter_serves_disk_and_memory_on_the_cluster_address_only(host: Any, node: Node) -> None:
    samples = _node_metrics(node)
    assert values(samples, "node_filesystem_avail_bytes"), "no filesystem metrics"
    assert (value(samples, "node_memory_MemTotal_bytes") or 0) > 0
    assert host.run("python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9100), 5)\"").rc != 0


def test_pi_throttling_flags_are_absent_without_a_pi_and_read_from_vcgencmd_on_one(
    host: Any, node: Node
) -> None:
    assert value(_node_metrics(node), "pi_throttled", flag="throttled_now") is None
    fake = "/usr/local/bin/vcgencmd"
    host.run(f"printf '#!/bin/sh\\necho throttled=0x50005\\n' > {fake} && chmod 755 {fake}")
    try:
        assert host.run("systemctl start pikit-pi-throttled.service").rc == 0
        samples = _node_metrics(node)
        flags = {s.labels["flag"]: s.value for s in samples if s.name == "pi_throttled"}
        assert flags == {
            "under_voltage_now": 1,
            "arm_freq_capped_now": 0,
            "throttled_now": 1,
            "soft_temp_limit_now": 0,
            "under_voltage_occurred": 1,
            "arm_freq_capped_occurred": 0,
            "throttled_occurred": 1,
            "soft_temp_limit_occurred": 0,
        }
    finally:
        host.run(f"rm -f {fake}")
    assert host.run("systemctl start pikit-pi-throttled.service").rc == 0
    assert value(_node_metrics(node), "pi_throttled", flag="throttled_now") is None
    assert host.service("pikit-pi-throttled.timer").is_enabled


def test_certificate_expiry_is_read_from_what_the_pki_role_lists(host: Any, node: Node) -> None:
    root = "/etc/ssl/certs/ISRG_Root_X1.pem"  # Debian's ca-certificates: expires 2035-06-04 11:04:38 UTC
    listing = "/etc/pikit/certificates.d/molecule.list"
    host.run(f"mkdir -p /etc/pikit/certificates.d && printf '{root}\\n/etc/pikit/missing.crt\\n' > {listing}")
    try:
        assert host.run("systemctl start pikit-cert-expiry.service").rc == 0
        samples = _node_metrics(node)
        subject = "CN=ISRG Root X1,O=Internet Security Research Group,C=US"
        expiry = value(samples, "pikit_certificate_expiry_timestamp_seconds", path=root, subject=subject)
        assert expiry == 2064567878, expiry
        assert value(samples, "pikit_certificate_readable", path=root) == 1
        assert value(samples, "pikit_certificate_readable", path="/etc/pikit/missing.crt") == 0
    finally:
        host.run(f"rm -f {listing}")
    assert host.run("systemctl start pikit-cert-expiry.service").rc == 0
    # What the kit's own roles list (a Kafka node's and a device's certificates) stays.
    after = _node_metrics(node)
    assert value(after, "pikit_certificate_readable", path=root) is None
    assert value(after, "pikit_certificate_readable", path="/etc/pikit/missing.crt") is None
    assert host.service("pikit-cert-expiry.timer").is_enabled


def test_a_failed_kit_unit_is_reported_until_it_is_reset(host: Any, node: Node) -> None:
    """pikit-unit-state asks systemd from inside its sandbox: a kit unit that failed (here a
    transient oneshot that exits 3) reads 1, and 0 once it no longer fails."""
    unit = "pikit-molecule-fails"
    assert host.run(f"systemd-run --unit={unit} --service-type=oneshot /bin/sh -c 'exit 3'").rc != 0
    try:
        assert host.run("systemctl start pikit-unit-state.service").rc == 0
        samples = _node_metrics(node)
        assert value(samples, "pikit_unit_failed", unit=unit) == 1
        assert value(samples, "pikit_unit_failed", unit="pikit-cert-expiry") == 0
        assert (value(samples, "pikit_unit_state_timestamp_seconds") or 0) > 0
    finally:
        host.run(f"systemctl reset-failed {unit}.service")
    assert host.run("systemctl start pikit-unit-state.service").rc == 0
    assert value(_node_metrics(node), "pikit_unit_failed", unit=unit) is None
    assert host.service("pikit-unit-state.timer").is_enabled
