"""Verify the common role on every lab node (testinfra, run by molecule verify)."""

from __future__ import annotations

from typing import Any

import pytest

JVM_GROUPS = {"kafka_controller", "kafka_broker", "spark_master", "spark_worker"}
USER_GROUPS = {
    "kafka": {"kafka_controller", "kafka_broker"},
    "spark": {"spark_master", "spark_worker"},
    "edge-agent": {"edge"},
}


@pytest.fixture()
def groups(host: Any) -> set[str]:
    return set(host.ansible.get_variables()["group_names"])


def test_java_only_on_jvm_nodes(host: Any, groups: set[str]) -> None:
    java = host.run("java -version")
    if groups & JVM_GROUPS:
        assert java.rc == 0, java.stderr
        assert 'version "17.' in java.stderr
    else:
        assert java.rc != 0
        assert not host.package("openjdk-17-jre-headless").is_installed


@pytest.mark.parametrize("user", sorted(USER_GROUPS))
def test_service_user_and_data_dir(host: Any, groups: set[str], user: str) -> None:
    wanted = bool(groups & USER_GROUPS[user])
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


def test_etc_hosts_lists_every_node(host: Any) -> None:
    hosts = host.file("/etc/hosts").content_string
    assert "127.0.0.1\tlocalhost" in hosts
    for name, ip in {
        "common-kafka": "10.89.78.11",
        "common-spark": "10.89.78.12",
        "common-edge": "10.89.78.13",
    }.items():
        assert f"{ip}\t{name}" in hosts
        assert host.addr(name).ip_addresses == [ip] or ip in host.addr(name).ip_addresses


def test_chrony_running_without_clock_control(host: Any) -> None:
    chrony = host.service("chrony")
    assert chrony.is_running
    assert chrony.is_enabled
    assert any("-x" in proc.args.split() for proc in host.process.filter(comm="chronyd"))


def test_sysctl_file_written_not_applied(host: Any) -> None:
    conf = host.file("/etc/sysctl.d/90-pikit.conf").content_string
    assert "vm.swappiness=1" in conf
    assert "vm.max_map_count=262144" in conf


def test_ssh_password_logins_off(host: Any) -> None:
    effective = host.run("sshd -T").stdout
    assert "passwordauthentication no" in effective
    assert "permitrootlogin without-password" in effective
