"""Where a Spark application's time went, per stage, from its event log (spark.eventLog.enabled).

stages(lines) -> one row per completed stage: its name, wall time, tasks, and the sums
over its tasks of run time, CPU time, GC time, spill and shuffle bytes.
jobs(lines) -> one row per job: when it started after the first, how long it ran, and the
driver's time before it (since the previous job ended), where no job ran at all.
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


@dataclass
class Job:
    job_id: int
    start_s: float
    run_s: float
    gap_s: float  # since the previous job ended: the driver's own time


def jobs(lines: Iterable[str]) -> list[Job]:
    started: dict[int, int] = {}
    ended: dict[int, int] = {}
    for line in lines:
        event = json.loads(line)
        if event.get("Event") == "SparkListenerJobStart":
            started[event["Job ID"]] = event["Submission Time"]
        elif event.get("Event") == "SparkListenerJobEnd":
            ended[event["Job ID"]] = event["Completion Time"]
    if not started:
        return []
    first, previous_end = min(started.values()), min(started.values())
    out = []
    for job_id in sorted(started, key=started.__getitem__):
        start, end = started[job_id], ended.get(job_id, started[job_id])
        out.append(
            Job(job_id, (start - first) / 1000, (end - start) / 1000, max(0, start - previous_end) / 1000)
        )
        previous_end = max(previous_end, end)
    return out


def table(lines: Iterable[str]) -> str:
    lines = list(lines)
    rows = stages(lines)
    columns = ["wall s", "tasks", *_TASK_SUMS, "shuffle read MB", "shuffle write MB"]
    out = ["| stage | name | " + " | ".join(columns) + " |", "|---:|---|" + "---:|" * len(columns)]
    for s in rows:
        values = [f"{s.wall_s:.1f}", str(s.tasks), *(f"{s.totals[c]:.1f}" for c in columns[2:])]
        out.append(f"| {s.stage_id} | {s.name[:60]} | " + " | ".join(values) + " |")
    timeline = jobs(lines)
    if timeline:
        out += ["", "| job | starts at s | runs s | driver before it s |", "|---:|---:|---:|---:|"]
        out += [f"| {j.job_id} | {j.start_s:.1f} | {j.run_s:.1f} | {j.gap_s:.1f} |" for j in timeline]
        running, driver = sum(j.run_s for j in timeline), sum(j.gap_s for j in timeline)
        out.append(f"jobs: {len(timeline)}, running {running:.1f} s, driver between them {driver:.1f} s")
    return "\n".join(out)
