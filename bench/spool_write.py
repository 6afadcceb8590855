"""Spool write cost per fsync policy: the spool as it is beside the spool before the
crash-consistency rework (git commit BEFORE), in one run, on the same disk.

Each round appends N readings of the agent's size (about 110 bytes of JSON) to a fresh
spool directory and times the appends only (open and close excluded), alternating
contenders so that the machine's noise falls on both. Prints per policy and contender
the median, min and max microseconds per append over the rounds, and the ratio of the
medians. The process is pinned to one core (taskset), like the agent on a busy Pi.

    taskset -c 0 .venv/bin/python -m bench.spool_write [--readings 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from edge_agent.spool import Spool

from bench.history import module_at
from pikit import REPO

BEFORE = "bbcbc8a"  # main before issue 10's spool rework
PAYLOAD = (
    b'{"seq":123456,"sensor":"bme280","metric":"temperature","value":21.37,"unit":"C","ts":1795323249.95}'
)


def time_appends(spool_class: Any, directory: Path, fsync: str, n: int) -> float:
    """Microseconds per append."""
    spool = spool_class(directory, fsync=fsync, fsync_interval=1.0, max_bytes=1 << 30, segment_bytes=4 << 20)
    started = time.perf_counter()
    for seq in range(n):
        spool.append(seq, PAYLOAD)
    elapsed = time.perf_counter() - started
    spool.close()
    return elapsed / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readings", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=REPO) as tmp:  # the repo's disk, not a tmpfs
        work = Path(tmp)
        before = module_at(BEFORE, "edge_agent/edge_agent/spool.py", "spool_before", work)
        contenders = {"before": before.Spool, "now": Spool}
        print(
            f"{args.readings} appends x {args.rounds} rounds per contender, pinned to CPU "
            f"{sorted(os.sched_getaffinity(0))}, disk of {REPO}"
        )
        print(f"{'fsync':<9} {'contender':<7} {'median us':>10} {'min':>8} {'max':>8}")
        for fsync in ("never", "interval", "always"):
            n = args.readings if fsync != "always" else max(200, args.readings // 20)
            results: dict[str, list[float]] = {name: [] for name in contenders}
            for rnd in range(args.rounds):
                for name, spool_class in contenders.items():
                    results[name].append(time_appends(spool_class, work / f"{fsync}-{name}-{rnd}", fsync, n))
            for name, values in results.items():
                print(
                    f"{fsync:<9} {name:<7} {statistics.median(values):10.2f} "
                    f"{min(values):8.2f} {max(values):8.2f}"
                )
            ratio = statistics.median(results["now"]) / statistics.median(results["before"])
            print(f"{fsync:<9} now/before median ratio {ratio:.2f} ({n} appends per round)")


if __name__ == "__main__":
    main()
