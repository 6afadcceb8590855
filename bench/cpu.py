"""How busy this machine's CPUs were while a bench measured, and how much of that was the bench.

The lab's nodes and the bench's own load generator share this machine's cores: a figure taken
with no idle CPU left measures the machine as much as the apps, and says so only if the bench
prints it beside the figure.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuShare:
    busy: float  # share of all the machine's CPU time that was not idle (0-1)
    bench_cores: float  # the bench process's own CPU time over the span, in cores
    cores: int

    def said(self) -> str:
        return (
            f"the machine's {self.cores} cores {100 * self.busy:.0f} % busy; "
            f"the bench's own process (its producer, its read-back) {self.bench_cores:.2f} of a core"
        )


def _idle_and_total() -> tuple[int, int]:
    """The first line of /proc/stat: user nice system idle iowait irq softirq steal (guest time
    is counted in user already)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return fields[3] + fields[4], sum(fields)


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process, no children
    return usage.ru_utime + usage.ru_stime


class CpuMeter:
    """Started when made; `share()` covers the span since."""

    def __init__(self) -> None:
        self._idle, self._total = _idle_and_total()
        self._own, self._wall = _own_cpu_s(), time.monotonic()

    def share(self) -> CpuShare:
        idle, total = _idle_and_total()
        wall = max(time.monotonic() - self._wall, 1e-9)
        spent = max(total - self._total, 1)
        return CpuShare(
            busy=1 - (idle - self._idle) / spent,
            bench_cores=(_own_cpu_s() - self._own) / wall,
            cores=os.cpu_count() or 1,
        )
