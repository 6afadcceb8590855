"""The controller and the lab, each weighed as one machine when they compete for the CPU.

A Pi has its CPU to itself; on the machine that runs the lab, the lab's nodes share its cores with
the controller's own processes (ansible-playbook and its forks, pytest, test producers). With
cgroup v1 and podman's cgroupfs manager (a machine without systemd), every container sits under
one cgroup, `libpod_parent`, which the kernel weighs as one process of the root cgroup: beside
three busy controller processes a busy lab node got 27-39 % of a core. Weighing the lab as eight
processes (74 %) starved the controller's playbooks instead: edge-revoke.yml took 89 s beside the
lab, against 37-52 s before. So make's pipelines run in a cgroup of their own, `pikit_controller`,
with the lab's weight: under contention each gets half the machine, whatever its process count
(docs/lab.md)."""

from __future__ import annotations

import os
from pathlib import Path

CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
CONTROLLER = "pikit_controller"
LAB = "libpod_parent"
SHARES = 1024


def weigh_as_one_machine(pid: int | None = None, root: Path = CPU_CGROUPS) -> bool:
    """Move `pid` (this process) and the children it starts from now on into the controller's
    cgroup, and give it and the lab's the same weight. False where this machine has no cgroup v1
    cpu hierarchy or it is not writable (cgroup v2, systemd's slices, no root): nothing changes."""
    if not (root / "cpu.shares").exists():
        return False
    try:
        for name in (CONTROLLER, LAB):
            (root / name).mkdir(exist_ok=True)
            (root / name / "cpu.shares").write_text(f"{SHARES}\n")
        (root / CONTROLLER / "cgroup.procs").write_text(f"{pid or os.getpid()}\n")
    except OSError:
        return False
    return True
