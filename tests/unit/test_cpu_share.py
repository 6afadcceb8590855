"""make's pipelines and the lab weigh the same when they compete for the CPU (pikit_dev.cpu_share)."""

from __future__ import annotations

import sys
from pathlib import Path

from pikit_dev.cpu_share import (
    BACKGROUND,
    BACKGROUND_SHARES,
    CONTROLLER,
    IDLE,
    IDLE_CONTROLLER,
    IDLE_LAB,
    LAB,
    idle_lab_parent,
    in_background,
    weigh_as_one_machine,
)


def test_the_pipeline_joins_its_cgroup_and_both_weigh_the_same(tmp_path: Path) -> None:
    (tmp_path / "cpu.shares").write_text("1024\n")
    (tmp_path / LAB).mkdir()
    (tmp_path / LAB / "cpu.shares").write_text("8192\n")
    assert weigh_as_one_machine(pid=4242, root=tmp_path)
    assert (tmp_path / CONTROLLER / "cgroup.procs").read_text() == "4242\n"
    shares = {(tmp_path / name / "cpu.shares").read_text() for name in (CONTROLLER, LAB)}
    assert shares == {"1024\n"}
    assert (tmp_path / BACKGROUND / "cpu.shares").read_text() == f"{BACKGROUND_SHARES}\n"


def test_a_command_joins_the_background_cgroup_where_there_is_one(tmp_path: Path) -> None:
    assert in_background(["ruff", "check"], root=tmp_path) == ["ruff", "check"]
    (tmp_path / "cpu.shares").write_text("1024\n")
    assert weigh_as_one_machine(pid=4242, root=tmp_path)
    assert in_background(["ruff", "check"], root=tmp_path) == [
        sys.executable,
        "-m",
        "pikit_dev.cpu_share",
        "--cgroup",
        BACKGROUND,
        "--",
        "ruff",
        "check",
    ]


def test_the_idle_cgroup_is_made_where_the_kernel_schedules_cgroups_idle(tmp_path: Path) -> None:
    (tmp_path / "cpu.shares").write_text("1024\n")
    assert weigh_as_one_machine(pid=4242, root=tmp_path)
    assert not (tmp_path / IDLE).exists(), "a kernel without cpu.idle gets no idle cgroup"
    assert idle_lab_parent(root=tmp_path) is None
    (tmp_path / "cpu.idle").write_text("0\n")
    assert idle_lab_parent(root=tmp_path) == f"/{IDLE_LAB}"
    assert (tmp_path / IDLE / "cpu.idle").read_text() == "1\n"
    assert (tmp_path / IDLE_CONTROLLER).is_dir()
    argv = in_background(["molecule", "test"], IDLE_CONTROLLER, root=tmp_path)
    assert argv[3:5] == ["--cgroup", IDLE_CONTROLLER]


def test_a_machine_without_a_v1_cpu_hierarchy_is_left_alone(tmp_path: Path) -> None:
    assert not weigh_as_one_machine(pid=4242, root=tmp_path)
    assert list(tmp_path.iterdir()) == []
