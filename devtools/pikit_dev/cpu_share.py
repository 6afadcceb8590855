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
machine, enough that no step of it times out (a bench entry's local broker must start in 90 s)."""

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


def weigh_as_one_machine(pid: int | None = None, root: Path = CPU_CGROUPS) -> bool:
    """Move `pid` (this process) and the children it starts from now on into the controller's
    cgroup, give it and the lab's the same weight, and make the background cgroup at half of it
    (in_background). False where this machine has no cgroup v1
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
    return True


def in_background(argv: Sequence[str], root: Path = CPU_CGROUPS) -> list[str]:
    """argv, run in the background cgroup where weigh_as_one_machine made one; as it is elsewhere."""
    if not (root / BACKGROUND).is_dir():
        return list(argv)
    return [sys.executable, "-m", __name__, "--", *argv]


def _join_background_and_exec(argv: Sequence[str], root: Path = CPU_CGROUPS) -> None:
    # Where it cannot join, it runs at the pipeline's own weight: slower neighbours, never a failed step.
    with contextlib.suppress(OSError):
        (root / BACKGROUND / "cgroup.procs").write_text(f"{os.getpid()}\n")
    os.execvp(argv[0], list(argv))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run a command in the background cgroup.")
    parser.add_argument("command", nargs="+")
    _join_background_and_exec(parser.parse_args(argv).command)


if __name__ == "__main__":
    main()
