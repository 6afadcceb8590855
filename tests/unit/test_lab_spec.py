"""The lab's shape is read from inventory/lab and checked before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pikit_dev import cpu_share, lab
from pikit_dev.lab import NETNS_SYSCTLS, LabSpec, Node, netns_sysctls, reflash, spec_from_inventory

from pikit import REPO


def test_lab_inventory_describes_the_lab() -> None:
    spec = spec_from_inventory(REPO / "inventory/lab")
    assert spec.name == "pikit-lab"
    names = {n.name for n in spec.nodes}
    assert {"pi-1", "pi-2", "pi-3", "pi-4", "edge-1", "edge-2"} <= names
    disks = {n.name: n.tmpfs for n in spec.nodes if n.tmpfs}
    assert disks == {broker: (("/srv/pikit/kafka", "512m"),) for broker in ("pi-1", "pi-2", "pi-3")}
    assert {n.suite for n in spec.nodes} == {"trixie"}
    spec.validate()


def test_a_node_may_run_its_own_release(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    pi-1: {ansible_host: 10.89.90.11, lab_suite: bookworm}\n"
        "    pi-2: {ansible_host: 10.89.90.12}\n"
        "  vars: {lab_name: x, lab_subnet: 10.89.90.0/24, lab_suite: trixie}\n"
    )
    spec = spec_from_inventory(tmp_path / "hosts.yml")
    assert {n.name: n.suite for n in spec.nodes} == {"pi-1": "bookworm", "pi-2": "trixie"}


def test_a_release_the_lab_cannot_build_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    pi-1: {ansible_host: 10.89.90.11}\n"
        "  vars: {lab_name: x, lab_subnet: 10.89.90.0/24, lab_suite: bullseye}\n"
    )
    with pytest.raises(SystemExit):
        spec_from_inventory(tmp_path / "hosts.yml")
    assert "lab_suite is 'bullseye'; the lab builds bookworm or trixie" in capsys.readouterr().err


def test_address_outside_the_subnet_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    spec = LabSpec("x", "10.89.90.0/24", (Node("pi-9", "10.89.91.5"),))
    with pytest.raises(SystemExit):
        spec.validate()
    assert "pi-9" in capsys.readouterr().err


def test_duplicate_addresses_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    spec = LabSpec("x", "10.89.90.0/24", (Node("a", "10.89.90.5"), Node("b", "10.89.90.5")))
    with pytest.raises(SystemExit):
        spec.validate()
    assert "share ansible_host 10.89.90.5" in capsys.readouterr().err


def test_the_lab_sets_the_network_settings_a_pi_gets_at_boot() -> None:
    defaults = yaml.safe_load((REPO / "roles/common/defaults/main.yml").read_text())
    assert defaults["common_sysctl_where_supported"] == NETNS_SYSCTLS


def test_a_network_setting_the_kernel_lacks_is_left_out(tmp_path: Path) -> None:
    assert netns_sysctls(tmp_path) == []
    (tmp_path / "net/ipv4").mkdir(parents=True)
    (tmp_path / "net/ipv4/tcp_rto_max_ms").write_text("120000\n")
    assert netns_sysctls(tmp_path) == ["--sysctl=net.ipv4.tcp_rto_max_ms=10000"]


def test_a_node_the_lab_lacks_is_not_reflashed(capsys: pytest.CaptureFixture[str]) -> None:
    spec = LabSpec("t", "10.0.0.0/24", (Node("a", "10.0.0.1"),))
    with pytest.raises(SystemExit):
        reflash(spec, ["a", "pi-9"], "trixie")
    assert "lab t has no node pi-9" in capsys.readouterr().err


def test_a_scenario_lab_may_run_idle_and_an_inventory_lab_keeps_the_labs_weight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[LabSpec] = []
    monkeypatch.setattr(lab, "up", lambda spec, arch=None: started.append(spec))
    argv = ["up", "--lab", "pikit-mol-x", "--subnet", "10.0.0.0/24", "--node", "a=10.0.0.1"]
    lab.main([*argv, "--idle"])
    lab.main(argv)
    assert [spec.idle for spec in started] == [True, False]
    monkeypatch.setattr(cpu_share, "idle_lab_parent", lambda: "/pikit_idle/lab")
    assert lab._cgroup_args(started[0]) == ["--cgroup-parent=/pikit_idle/lab"]
    assert lab._cgroup_args(started[1]) == []
    create = yaml.safe_load((REPO / "tests/molecule/create.yml").read_text())
    start = next(task for task in create[0]["tasks"] if task["name"] == "Start the scenario's containers")
    assert "(['--idle'] if _idle | bool else [])" in start["ansible.builtin.command"]["argv"]
    assert "PIKIT_LAB_IDLE" in create[0]["vars"]["_idle"]


@pytest.mark.parametrize(("idle", "kafka", "spark"), [(None, 300, 180), ("1", 1200, 720)])
def test_an_idle_lab_waits_longer_for_its_services_to_start(idle: str | None, kafka: int, spark: int) -> None:
    """make test-ops' idle scenarios (PIKIT_LAB_IDLE=1) get only the CPU left over: their health
    gates wait four times the roles' defaults; any other lab waits the defaults."""
    env = {k: v for k, v in os.environ.items() if k != "PIKIT_LAB_IDLE"} | (
        {"PIKIT_LAB_IDLE": idle} if idle else {}
    )
    msg = (
        "{{ [kafka_restart_timeout, spark_restart_timeout, connect_start_timeout] | map('int') | join(',') }}"
    )
    ansible = Path(sys.executable).parent / "ansible"
    argv = [
        str(ansible),
        "-i",
        "inventory/lab",
        "pi-1",
        "-o",
        "-m",
        "ansible.builtin.debug",
        "-a",
        f"msg={msg}",
    ]
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    assert f'"msg": "{kafka},{spark},{spark}"' in out, out
