"""make's pipelines and the lab weigh the same when they compete for the CPU (pikit_dev.cpu_share)."""

from __future__ import annotations

from pathlib import Path

from pikit_dev.cpu_share import CONTROLLER, LAB, weigh_as_one_machine


def test_the_pipeline_joins_its_cgroup_and_both_weigh_the_same(tmp_path: Path) -> None:
    (tmp_path / "cpu.shares").write_text("1024\n")
    (tmp_path / LAB).mkdir()
    (tmp_path / LAB / "cpu.shares").write_text("8192\n")
    assert weigh_as_one_machine(pid=4242, root=tmp_path)
    assert (tmp_path / CONTROLLER / "cgroup.procs").read_text() == "4242\n"
    shares = {(tmp_path / name / "cpu.shares").read_text() for name in (CONTROLLER, LAB)}
    assert shares == {"1024\n"}


def test_a_machine_without_a_v1_cpu_hierarchy_is_left_alone(tmp_path: Path) -> None:
    assert not weigh_as_one_machine(pid=4242, root=tmp_path)
    assert list(tmp_path.iterdir()) == []
