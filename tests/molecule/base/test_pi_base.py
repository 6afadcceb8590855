"""pi_base on lab containers: what a container has is applied, the rest is skipped (the survey's
reasons are unit-tested in tests/unit/test_pi_base_facts.py)."""

from __future__ import annotations

from typing import Any

from pikit_testkit.molecule_lab import Node


def test_the_journal_is_capped_and_journald_runs_with_it(host: Any) -> None:
    conf = host.file("/etc/systemd/journald.conf.d/90-pikit.conf")
    assert conf.exists and "Storage=persistent" in conf.content_string
    assert "SystemMaxUse=64M" in conf.content_string
    assert host.service("systemd-journald").is_running


def test_the_memory_cgroup_is_enabled_on_a_spark_node_that_has_a_cmdline(host: Any, node: Node) -> None:
    cmdline = host.file("/boot/firmware/cmdline.txt")
    if "spark_master" not in node.groups:
        assert not cmdline.exists
        return
    tokens = cmdline.content_string.split()
    assert tokens[-2:] == ["cgroup_enable=memory", "cgroup_memory=1"]
    assert "cgroup_disable=memory" not in tokens
    assert tokens[0] == "console=serial0,115200" and cmdline.content_string.count("\n") == 1


def test_what_a_container_lacks_is_left_alone(host: Any) -> None:
    assert not host.file("/etc/systemd/system.conf.d/90-pikit-watchdog.conf").exists
    # pi_base_time_sync_wait: false in the lab; chrony itself is the common role's (absent here).
    enabled = host.run("systemctl is-enabled chrony-wait.service").stdout.strip()
    assert enabled != "enabled", enabled
