"""The controller and the lab, each weighed as one machine when they compete for the CPU.

A Pi has its CPU to itself; on the machine that runs the lab, the lab's nodes share its cores with
the controller's own processes (ansible-playbook and its forks, pytest, test producers). With
cgroup v1 and podman's cgroupfs manager (a machine without systemd), every container sits under
one cgroup, `libpod_parent`, which the kernel weighs as one process of the root cgroup: beside
three busy controller processes a busy lab node got 27-39 % of a core. Weighing the lab as eight
processes (74 %) starved the controller's playbooks instead: edge-revoke.yml took 89 s beside the
lab, against 37-52 s before. So make's pipelines run in a cgroup of their own, `pikit_controller`,
with the lab's weight: under contention each gets half the machine, whatever its process count
(docs/lab.md).

Work that no bound waits on (lint, the bench entries at a tiny size) runs in a third cgroup,
`pikit_background`, at half that weight: it takes whatever CPU the timed phases leave idle (the
end-to-end scenarios that run alone leave 0.4-0.9 of a core), and under contention a fifth of the
machine, enough that no step of it times out (a bench entry's local broker must start in 90 s).

Work that must never slow a timed phase, whatever its size, runs in a fourth, `pikit_idle`, which
the kernel schedules as SCHED_IDLE (`cpu.idle`): it runs only on CPU that every other cgroup leaves
unused. make test-ops' molecule scenarios run there, both their controller side and their nodes
(`IDLE_CONTROLLER`, `IDLE_LAB`), beside the end-to-end suite's bounded faults: at any lower weight
short of idle, its Kafka scenarios pushed the long nemesis's recoveries past their 60 s bounds
(docs/testing.md, "make test-ops scenarios")."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
CONTROLLER = "pikit_controller"
LAB = "libpod_parent"
SHARES = 1024
BACKGROUND = "pikit_background"
BACKGROUND_SHARES = 512
IDLE = "pikit_idle"
IDLE_CONTROLLER = f"{IDLE}/controller"
IDLE_LAB = f"{IDLE}/lab"


def weigh_as_one_machine(pid: int | None = None, root: Path = CPU_CGROUPS) -> bool:
    """Move `pid` (this process) and the children it starts from now on into the controller's
    cgroup, give it and the lab's the same weight, and make the background cgroup at half of it
    (in_background) and the idle cgroup (make_idle). False where this machine has no cgroup v1
    cpu hierarchy or it is not writable (cgroup v2, systemd's slices, no root): nothing changes."""
    if not (root / "cpu.shares").exists():
        return False
    try:
        for name, shares in ((CONTROLLER, SHARES), (LAB, SHARES), (BACKGROUND, BACKGROUND_SHARES)):
            (root / name).mkdir(exist_ok=True)
            (root / name / "cpu.shares").write_text(f"{shares}\n")
        (root / CONTROLLER / "cgroup.procs").write_text(f"{pid or os.getpid()}\n")
    except OSError:
        return False
    make_idle(root)
    return True


def make_idle(root: Path = CPU_CGROUPS) -> bool:
    """The idle cgroup and its two halves, the controller's and the lab's, each at the kernel's
    default weight within it. False where the kernel has no `cpu.idle` (before 5.15) or the
    hierarchy is not writable: then nothing runs idle, and its work runs at its caller's weight."""
    if not (root / "cpu.idle").exists():
        return False
    try:
        for name in (IDLE, IDLE_CONTROLLER, IDLE_LAB):
            (root / name).mkdir(exist_ok=True)
        (root / IDLE / "cpu.idle").write_text("1\n")
    except OSError:
        return False
    return True


def idle_lab_parent(root: Path = CPU_CGROUPS) -> str | None:
    """podman's --cgroup-parent for lab nodes that run idle; None where there is no idle cgroup."""
    return f"/{IDLE_LAB}" if make_idle(root) else None


def in_background(argv: Sequence[str], cgroup: str = BACKGROUND, root: Path = CPU_CGROUPS) -> list[str]:
    """argv, run in `cgroup` (the background's by default) where weigh_as_one_machine made it;
    as it is elsewhere."""
    if not (root / cgroup).is_dir():
        return list(argv)
    return [sys.executable, "-m", __name__, "--cgroup", cgroup, "--", *argv]


def _join_and_exec(cgroup: str, argv: Sequence[str], root: Path = CPU_CGROUPS) -> None:
    # Where it cannot join, it runs at the pipeline's own weight: slower neighbours, never a failed step.
    with contextlib.suppress(OSError):
        (root / cgroup / "cgroup.procs").write_text(f"{os.getpid()}\n")
    os.execvp(argv[0], list(argv))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run a command in one of the pipeline's cgroups.")
    parser.add_argument("--cgroup", default=BACKGROUND, choices=(BACKGROUND, IDLE_CONTROLLER))
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    _join_and_exec(args.cgroup, args.command)


if __name__ == "__main__":
    main()
