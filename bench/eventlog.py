"""Where a Spark application's time went, per stage, from its event log (spark.eventLog.enabled).

stages(lines) -> one row per completed stage: its name, wall time, tasks, and the sums
over its tasks of run time, CPU time, GC time, spill and shuffle bytes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Stage:
    stage_id: int
    name: str = ""
    wall_s: float = 0.0
    tasks: int = 0
    totals: dict[str, float] = field(default_factory=lambda: defaultdict(float))


_TASK_SUMS = {
    "run s": ("Executor Run Time", 1e-3),
    "cpu s": ("Executor CPU Time", 1e-9),
    "gc s": ("JVM GC Time", 1e-3),
    "deser s": ("Executor Deserialize Time", 1e-3),
    "spill MB": ("Disk Bytes Spilled", 1e-6),
}


def stages(lines: Iterable[str]) -> list[Stage]:
    found: dict[int, Stage] = {}
    for line in lines:
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerTaskEnd":
            stage = found.setdefault(event["Stage ID"], Stage(event["Stage ID"]))
            metrics = event.get("Task Metrics") or {}
            stage.tasks += 1
            for column, (key, scale) in _TASK_SUMS.items():
                stage.totals[column] += metrics.get(key, 0) * scale
            read = metrics.get("Shuffle Read Metrics") or {}
            write = metrics.get("Shuffle Write Metrics") or {}
            remote, local = read.get("Remote Bytes Read", 0), read.get("Local Bytes Read", 0)
            stage.totals["shuffle read MB"] += (remote + local) * 1e-6
            stage.totals["shuffle write MB"] += write.get("Shuffle Bytes Written", 0) * 1e-6
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            stage = found.setdefault(info["Stage ID"], Stage(info["Stage ID"]))
            stage.name = info["Stage Name"]
            stage.wall_s = (info.get("Completion Time", 0) - info.get("Submission Time", 0)) / 1000
    return [found[i] for i in sorted(found)]


def table(lines: Iterable[str]) -> str:
    rows = stages(lines)
    columns = ["wall s", "tasks", *_TASK_SUMS, "shuffle read MB", "shuffle write MB"]
    out = ["| stage | name | " + " | ".join(columns) + " |", "|---:|---|" + "---:|" * len(columns)]
    for s in rows:
        values = [f"{s.wall_s:.1f}", str(s.tasks), *(f"{s.totals[c]:.1f}" for c in columns[2:])]
        out.append(f"| {s.stage_id} | {s.name[:60]} | " + " | ".join(values) + " |")
    return "\n".join(out)
