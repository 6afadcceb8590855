"""What one micro-batch of each lab app costs, at the demo's load and at 10,000 devices.

Needs the demo's lab, converged (`make demo`). Each phase first runs the spark play with the
apps' event log on (`spark_history_enabled`) and submits both apps again with the phase's devices'
signing keys (`pikit_device_signing_extra`: the probe's, and the synthetic devices'), then
restarts them; it waits for their first batches and `--warmup` seconds more, then measures for
`--seconds`:

- demo: the lab's two agents as they run, nothing else;
- devices: N synthetic devices (`bench-0` ...) at 1 reading/s each, every record signed, each
  device sending a record of `--per-record` readings every `--per-record` seconds, staggered.

In both phases a probe device (`probe-0`) sends one reading every `--probe-every` seconds,
alternately out of the lab's `simulated.temperature` bounds (99) and back within them (20):
each out-of-bounds reading starts an excursion, which must raise one alert.

A contender with `{"spark_history_enabled": false}` runs the apps as the role does by default, with
no event log, which costs the driver part of each batch (bench/README.md, "What the event log
costs"): its batches come from the drivers' progress lines in the journal, and their Spark jobs
and where their time went are not known.

Per app it reports, from the app's own event log on its driver's Pi:
- each micro-batch's wall time (Spark's `triggerExecution`: median, p99) and input rows;
- the Spark jobs each batch ran (jobs submitted between the batch's start and its end), and where
  its time went (medians, printed per phase): Spark's planning, its offset and commit logs, its
  jobs, and the driver's own work around them;
- the driver's RSS (the JVM and its Python, every process of the app's unit), sampled every 5 s;
- the rows of the app's state at its last commit (its state topic);
- for the app `--app` names (sensor_aggregates by default; both fold on their executors): how many
  partitions' folds moved to another worker (its driver's journal: that worker's state caught up
  with the other's commits), and the CPU seconds of its busiest executor (the JVM and its Python
  workers, read from /proc on the workers) per batch and per 100,000 rows in. `--cores 1,2` runs
  each contender with that app on one executor and on two: what a second Pi's executor divides.
  The ratios close the run, per turn, per batch and per row in; a pair whose batches differ in
  size (one contender fell behind and read twice the rows a batch) is named, and compares per row
  in only;
and, read back from Kafka (read_committed): window end -> its aggregate arrived (every device
but the probe), and out-of-bounds reading -> its alert arrived (the probe's). For the synthetic
devices also closing record -> aggregate: from the device's first record past the window's end
and the device slack, which is what closes it, to the aggregate. A synthetic device sends its
readings every `--per-record` seconds, so its event time reaches end + slack up to that long
after a device at 1 reading/s would: the first figure holds the device's own wait, the second
the apps' part alone.

    make demo && .venv/bin/python -m bench.batch_cost [--seconds 300] [--devices 10000] \
        [--java-options "C1=-XX:TieredStopAtLevel=1" --java-options "C2=-XX:TieredStopAtLevel=4"] \
        [--vars 'slack8={"spark_device_slack_seconds": 8}' --vars 'slack10={...: 10}']
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
import zstandard
from kafka import KafkaProducer
from pikit_contract import signing
from pikit_contract.names import spark_state_topic
from pikit_contract.readings import Reading, encode_batch
from pikit_spark.anomalies import STATE_SCHEMAS as ALERT_STATE
from pikit_spark.changelog import read_state
from pikit_spark.device_windows import STATE_SCHEMAS as WINDOW_STATE

from bench import lab as lab_
from bench.cpu import CpuMeter
from bench.rounds import named
from pikit import REPO, role_default

WINDOW_S = 60
PROBE = "probe-0"
# app name -> (its systemd unit, its query's name in its scratch checkpoint)
APPS = {
    "sensor_aggregates": ("spark-app-sensor-aggregates", "sensor_aggregates/stream"),
    "anomaly_alerts": ("spark-app-anomaly-alerts", "anomaly_alerts/readings"),
}
STATE_SCHEMAS_OF = {"sensor_aggregates": WINDOW_STATE, "anomaly_alerts": ALERT_STATE}
PROGRESS_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"


@dataclass
class Apps:
    """The lab's two streaming apps: converged, restarted and read back."""

    lab: lab_.Lab

    @classmethod
    def find(cls) -> Apps:
        return cls(lab_.find())

    def converge(self, devices: list[str], contender: dict[str, Any]) -> None:
        """The spark play with the event log on, each app submitted again with these devices' keys
        (the submission writes an app's keys; the spark play alone never touches the apps), and
        the apps restarted, so that they read the new Spark defaults too; `contender`'s variables
        (e.g. spark_app_java_options) override the inventory's."""
        extra: dict[str, Any] = {
            "spark_history_enabled": True,
            **contender,
            "pikit_device_signing_extra": devices,
        }
        with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
            json.dump(extra, file)
            file.flush()
            started = time.monotonic()
            self.play("-e", f"@{file.name}")
        print(
            f"  spark.yml and the apps' submission with {len(devices)} extra devices' keys: "
            f"{time.monotonic() - started:.0f} s",
            flush=True,
        )

    def restore(self) -> None:
        """The spark play and the apps as the inventory has them."""
        self.play()

    def play(self, *extra: str) -> None:
        run_play("playbooks/spark.yml", *extra)
        for app in APPS:
            run_play("playbooks/submit.yml", "-e", f"app={app}", *extra)
        self.restart()

    def restart(self) -> None:
        """Every driver Pi's units of the apps, so that the standbys take the new settings too."""
        for node in self.lab.drivers:
            for unit, _ in APPS.values():
                subprocess.run(["podman", "exec", node, "systemctl", "restart", unit], check=True)

    def event_log(self, app: str) -> list[dict[str, Any]]:
        """The running app's event log (Spark 4's rolling layout, zstd-compressed): the newest on
        any driver Pi (a standby has no Spark session, so none; right after a restart no commit
        tells yet which Pi is active)."""
        logs = sorted(
            (
                (log.stat().st_mtime, node, log)
                for node in self.lab.drivers
                for log in (self.lab.spark_data_of(node) / "event-logs").glob("eventlog_v2_app-*")
            ),
            reverse=True,
        )
        for _, _, log in logs:
            if not any(log.glob("appstatus_*.inprogress")):
                continue
            events = [json.loads(line) for line in _event_lines(log)]
            if any(
                e.get("Event") == "SparkListenerApplicationStart" and e.get("App Name") == app for e in events
            ):
                return events
        raise SystemExit(f"no running event log of {app} on the driver Pis {', '.join(self.lab.drivers)}")

    def batches(self, app: str, since: float, until: float, logged: bool) -> list[Batch]:
        """The app's micro-batches with input that started in [since, until), from its event log
        (`logged`) or its driver's progress lines."""
        if logged:
            return batches(self.event_log(app), since, until)
        return self.journal_batches(app, since, until)

    def journal_batches(self, app: str, since: float, until: float) -> list[Batch]:
        """The app's micro-batches with input that started in [since, until), from the progress
        lines its driver logs (pikit_spark/progress.py): what an app without the event log tells."""
        return progress_batches(self.journal(app, since), since, until)

    def journal(self, app: str, since: float) -> list[str]:
        """The app's journal lines since `since` on every driver Pi (`-o short-unix`)."""
        unit, _ = APPS[app]
        journal = [
            "journalctl",
            "-u",
            unit,
            "-o",
            "short-unix",
            "--no-pager",
            "-q",
            "--since",
            f"@{since:.0f}",
        ]
        lines: list[str] = []
        for node in self.lab.drivers:
            lines += subprocess.run(
                ["podman", "exec", node, *journal],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()
        return lines

    def state_rows(self, app: str) -> int:
        """The rows of the app's state at its last commit, read from its state topic."""
        tables = read_state(spark_state_topic(app), STATE_SCHEMAS_OF[app], self.lab.client)
        return sum(len(rows) for rows in tables.values())


def _event_lines(log: Path) -> Iterator[str]:
    """Whole JSON lines of a rolling event log; the last may still be half written."""
    for part in sorted(log.glob("events_*"), key=lambda p: int(p.name.split("_")[1])):
        data = part.read_bytes()
        if part.suffix == ".zstd":
            data = _zstd_frames(data)
        for line in data.decode(errors="replace").splitlines():
            if line.startswith("{") and line.endswith("}"):
                yield line


def _zstd_frames(data: bytes) -> bytes:
    """Every whole frame of a zstd stream that is still being written (Spark flushes a frame at a time)."""
    out = []
    while data:
        frame = zstandard.ZstdDecompressor().decompressobj()
        try:
            out.append(frame.decompress(data))
        except zstandard.ZstdError:
            break
        if not frame.eof:
            break  # the frame being written: its lines are not whole yet
        data = frame.unused_data
    return b"".join(out)


def run_play(playbook: str, *extra: str) -> None:
    """A playbook; its output goes to a log, whose end is shown if the play fails."""
    log = Path(tempfile.gettempdir()) / "pikit-bench-play.log"
    with log.open("w") as out:
        done = subprocess.run(
            [str(REPO / ".venv/bin/ansible-playbook"), playbook, *extra],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if done.returncode:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise SystemExit(f"{playbook} failed ({done.returncode}); the end of {log}:\n{tail}")


def driver_rss_mib(master: str, unit: str) -> float:
    """RSS of every process of the app's unit on its driver Pi (the driver's JVM and its Python)."""
    # By each process's own cgroup line: the lab's nodes see the host's cgroup paths (and, on a
    # cgroup v1 host, no unit directories under /sys/fs/cgroup at all).
    script = (
        "for p in /proc/[0-9]*; do "
        f"grep -qs '/{unit}.service$' $p/cgroup && grep -s VmRSS $p/status; done; true"
    )
    out = subprocess.run(
        ["podman", "exec", master, "sh", "-c", script], capture_output=True, text=True, check=True
    ).stdout
    return sum(int(line.split()[1]) for line in out.splitlines() if line.startswith("VmRSS")) / 1024


def driver_cpu_s(node: str, unit: str) -> float:
    """CPU seconds spent so far by every process of the app's unit on its driver Pi (the driver's
    JVM and its Python, with their reaped children)."""
    script = f"for p in /proc/[0-9]*; do grep -qs '/{unit}.service$' $p/cgroup && cat $p/stat; done; true"
    out = subprocess.run(
        ["podman", "exec", node, "sh", "-c", script], capture_output=True, text=True, check=True
    ).stdout
    # utime, stime, cutime, cstime: the fields after the command's closing parenthesis, 11 to 14.
    stats = [line.rsplit(")", 1)[1].split() for line in out.splitlines() if ")" in line]
    ticks = sum(sum(map(int, fields[11:15])) for fields in stats)
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class Batch:
    batch_id: int
    started: float
    wall_s: float
    rows: int
    jobs: int = 0
    jobs_s: float = 0.0  # the wall time of its Spark jobs, submission to completion, summed
    durations: dict[str, float] = field(default_factory=dict)  # Spark's durationMs, in s

    def parts(self) -> dict[str, float]:
        """Where the batch's wall time went: Spark's planning of it, its offset and commit
        logs, its Spark jobs, and the driver's own work around the jobs in foreachBatch (the
        summary's plan, the fold, the state and the sink)."""
        d = self.durations
        logs = sum(d.get(k, 0.0) for k in ("latestOffset", "getBatch", "walCommit", "commitOffsets"))
        return {
            "planning": d.get("queryPlanning", 0.0),
            "offset and commit logs": logs,
            "Spark jobs": self.jobs_s,
            "driver": max(d.get("addBatch", 0.0) - self.jobs_s, 0.0),
        }


# A progress line (pikit_spark/progress.py) as journalctl -o short-unix prints it.
_PROGRESS_LINE = re.compile(
    r"^(?P<at>[\d.]+) .* query \S+ batch (?P<id>\d+): (?P<rows>\d+) rows in, "
    r".*?(?P<ms>\d+) ms \((?P<parts>[^)]*)\)"
)


def progress_batches(lines: list[str], since: float, until: float) -> list[Batch]:
    """The batches with input that started in [since, until), from journal lines (`-o short-unix`)
    of the drivers' progress log: each line is logged as its batch ends."""
    found = []
    for line in lines:
        matched = _PROGRESS_LINE.match(line)
        if not matched or not int(matched["rows"]):
            continue
        wall = int(matched["ms"]) / 1000
        started = float(matched["at"]) - wall
        if since <= started < until:
            parts = (part.rsplit(" ", 1) for part in matched["parts"].split(", ") if part)
            durations = {name: int(ms) / 1000 for name, ms in parts}
            found.append(Batch(int(matched["id"]), started, wall, int(matched["rows"]), durations=durations))
    return sorted(found, key=lambda b: b.started)


# An app's line for a batch whose task found its partition's state behind: another worker's task
# had folded that partition since (partition_fold.batch_line).
_CAUGHT_UP = re.compile(
    r"^(?P<at>[\d.]+) .* batch \d+: committed .*the state of \[(?P<parts>[\d, ]+)\] caught up"
)
_COMMITTED = re.compile(r"^(?P<at>[\d.]+) .* batch \d+: committed \d+ records of [1-9]")


def caught_up(lines: list[str], since: float, until: float) -> tuple[int, int]:
    """(partitions caught up, batches that committed something) in [since, until): how often a
    partition's fold moved to another worker, whose state then read what the other had written."""
    moved = sum(
        len(m["parts"].split(","))
        for m in map(_CAUGHT_UP.match, lines)
        if m is not None and since <= float(m["at"]) < until
    )
    folds = sum(1 for m in map(_COMMITTED.match, lines) if m is not None and since <= float(m["at"]) < until)
    return moved, folds


# Run on a Spark worker: the CPU seconds of each of an application's executors, one line each. An
# executor is a JVM whose command line names the application (CoarseGrainedExecutorBackend's
# --app-id); it counts with every process under it: the PySpark daemon and its Python workers, live
# or reaped.
_EXECUTOR_CPU = r"""
import os, sys
app, tick = sys.argv[1], os.sysconf("SC_CLK_TCK")
stats = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    stats[int(pid)] = (int(fields[1]), sum(map(int, fields[11:15])))
children = {}
for pid, (parent, _) in stats.items():
    children.setdefault(parent, []).append(pid)
for pid in stats:
    try:
        command = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    if not command[0].endswith(b"java") or app.encode() not in command:
        continue
    total, todo = 0, [pid]
    while todo:
        one = todo.pop()
        total += stats[one][1]
        todo += children.get(one, [])
    print(pid, total / tick)
"""


def executor_cpu(lab: lab_.Lab, app_id: str) -> dict[str, float]:
    """The CPU seconds each executor of the application has used so far, by "node/pid"."""
    spent = {}
    for node in lab.groups["spark_worker"]:
        out = subprocess.run(
            ["podman", "exec", node, "python3", "-c", _EXECUTOR_CPU, app_id],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for line in out.splitlines():
            pid, seconds = line.split()
            spent[f"{node}/{pid}"] = float(seconds)
    return spent


def application_id(events: list[dict[str, Any]]) -> str:
    """The application's id (app-...), as its event log starts."""
    return str(next(e["App ID"] for e in events if e.get("Event") == "SparkListenerApplicationStart"))


def busiest_executor(before: dict[str, float], after: dict[str, float]) -> float:
    """The CPU seconds of the executor that spent most between the two readings: one that began
    meanwhile counts all it spent; one that ended meanwhile is not seen, and does not count."""
    return max((after[k] - before.get(k, 0.0) for k in after), default=0.0)


def executor_hosts(events: list[dict[str, Any]]) -> list[str]:
    """The hosts of the app's executors at the end of its event log, one per executor: two
    executors on one Pi trade its readings partitions between their Python workers, and a phase's
    tail follows (bench/README.md, "Before and after the fold moved to the executors")."""
    hosts: dict[str, str] = {}
    for event in events:
        if event.get("Event") == "SparkListenerExecutorAdded":
            hosts[event["Executor ID"]] = event["Executor Info"]["Host"]
        elif event.get("Event") == "SparkListenerExecutorRemoved":
            hosts.pop(event["Executor ID"], None)
    return sorted(hosts.values())


def batches(events: list[dict[str, Any]], since: float, until: float) -> list[Batch]:
    """The app's micro-batches with input that started in [since, until), each with the Spark
    jobs it ran: those tagged with its batch id, and untagged ones submitted while it ran (a
    job from a thread of the driver's own carries no tag)."""
    found = []
    for event in events:
        if event.get("Event") != PROGRESS_EVENT:
            continue
        progress = event["progress"]
        started = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
        rows = sum(source.get("numInputRows", 0) for source in progress.get("sources", []))
        if since <= started < until and rows:
            durations = {k: v / 1000 for k, v in progress["durationMs"].items()}
            wall = durations["triggerExecution"]
            found.append(Batch(progress["batchId"], started, wall, rows, durations=durations))
    ended = {
        e["Job ID"]: e["Completion Time"] / 1000 for e in events if e.get("Event") == "SparkListenerJobEnd"
    }
    jobs = [
        (
            e["Submission Time"] / 1000,
            e.get("Properties", {}).get("streaming.sql.batchId"),
            ended.get(e["Job ID"]),
        )
        for e in events
        if e.get("Event") == "SparkListenerJobStart"
    ]
    for batch in found:
        mine = [
            (at, end)
            for at, tag, end in jobs
            if tag == str(batch.batch_id)
            or (tag is None and batch.started <= at <= batch.started + batch.wall_s)
        ]
        batch.jobs = len(mine)
        batch.jobs_s = sum(end - at for at, end in mine if end is not None)
    return found


@dataclass(eq=False)  # a thread is hashed by its identity
class Watch(threading.Thread):
    """When each window's aggregate and each probe alert arrived (read_committed)."""

    lab: lab_.Lab
    windows: dict[tuple[str, int], float] = field(default_factory=dict)
    alerts: dict[int, float] = field(default_factory=dict)  # probe seq -> arrival
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)
        self.consumer = self.lab.committed(self.lab.topics["aggregates"], self.lab.topics["alerts"])

    def run(self) -> None:
        while not self.stop.is_set():
            for records in self.consumer.poll(timeout_ms=200).values():
                now = time.time()
                for record in records:
                    doc = json.loads(record.value)
                    if record.topic == self.lab.topics["alerts"]:
                        if doc["device"] == PROBE and "seq" in doc:
                            self.alerts.setdefault(doc["seq"], now)
                    elif doc["device"] != PROBE:
                        self.windows.setdefault((doc["device"], int(doc["window_start"])), now)


@dataclass
class Sent:
    readings: int  # the synthetic devices'
    probes: dict[int, float]  # the probe's out-of-bounds readings: seq -> ts
    records: dict[str, list[float]]  # synthetic device -> when it sent each record (its readings' ts)


def produce(lab: lab_.Lab, devices: list[str], per_record: int, probe_every: float, seconds: float) -> Sent:
    """The synthetic devices' records and the probe's readings, for `seconds`."""
    producer = KafkaProducer(
        **lab.client, acks="all", linger_ms=20, batch_size=256 * 1024, compression_type="zstd"
    )
    keys = lab.device_keys([*devices, PROBE])
    seqs = dict.fromkeys(keys, int(time.time() * 1000))
    out: dict[int, float] = {}
    records: dict[str, list[float]] = {device: [] for device in devices}

    def send(device: str, values: list[float], sensor: str, metric: str) -> None:
        now = time.time()
        readings = []
        for value in values:
            seqs[device] += 1
            readings.append(Reading(device, seqs[device], sensor, metric, value, "C", now))
        value_bytes = encode_batch(device, readings)
        if device in records:
            records[device].append(now)
        producer.send(
            lab.topics["readings"],
            key=device.encode(),
            value=value_bytes,
            headers=signing.headers(device, keys[device], value_bytes),
        )

    sent, started, next_probe, probes = 0, time.time(), time.time(), 0
    # Each device sends once every `per_record` seconds, at its own offset within that period.
    slot = per_record / max(len(devices), 1)
    cursor = 0
    while (now := time.time()) - started < seconds:
        if now >= next_probe:
            high = probes % 2 == 0
            send(PROBE, [99.0 if high else 20.0], "simulated", "temperature")
            if high:
                out[seqs[PROBE]] = now
            probes, next_probe = probes + 1, next_probe + probe_every
        due = int((now - started) / slot) if devices else 0
        while cursor < due:
            device = devices[cursor % len(devices)]
            send(device, [20.0 + (cursor % 7) * 0.1] * per_record, "bench", "value")
            cursor, sent = cursor + 1, sent + per_record
        time.sleep(0.01)
    if probes % 2:  # the last was out of bounds: end its excursion, so the next phase starts a new one
        send(PROBE, [20.0], "simulated", "temperature")
    producer.flush()
    producer.close()
    return Sent(sent, out, records)


def device_slack(contender: dict[str, Any]) -> int:
    """The device slack the phase's apps run with: the contender's, else the lab inventory's,
    else the spark role's default."""
    name = "spark_device_slack_seconds"
    lab_vars = yaml.safe_load((lab_.INVENTORY / "group_vars/all.yml").read_text())
    return int(contender.get(name, lab_vars.get(name, role_default("spark", name))))


def closing_to_aggregate(
    windows: dict[tuple[str, int], float], records: dict[str, list[float]], slack: int
) -> list[float]:
    """Per window of a synthetic device: the aggregate's arrival less when the device sent its
    first record stamped at or past the window's end plus the slack (the record that closed it)."""
    found = []
    for (device, start), arrived in windows.items():
        sent = records.get(device, [])
        at = bisect.bisect_left(sent, start + WINDOW_S + slack)
        if at < len(sent):
            found.append(arrived - sent[at])
    return found


def wait_for_batches(apps: Apps, since: float, logged: bool, timeout: float = 600) -> None:
    """Until every app has run a micro-batch with input since `since` (the apps restarted), as its
    event log tells, or without one (not `logged`) its driver's progress lines."""
    deadline = time.monotonic() + timeout
    why = ""
    while time.monotonic() < deadline:
        try:
            if all(apps.batches(app, since, time.time() + 1, logged) for app in APPS):
                return
            why = "no micro-batch with input in their " + ("event logs" if logged else "drivers' journals")
        except SystemExit as error:
            why = str(error)
        time.sleep(5)
    raise SystemExit(f"the apps' restart was not followed within {timeout:.0f} s by a micro-batch: {why}")


def app_cores(app: str, cores: int) -> dict[str, Any]:
    """The variables that give `app` `cores` cores: the role's spark_apps with that app's
    total_cores changed (the inventory does not set spark_apps)."""
    spark_apps = yaml.safe_load((REPO / "roles/spark/defaults/main.yml").read_text())["spark_apps"]
    spark_apps[app]["total_cores"] = cores
    return {"spark_apps": spark_apps}


def driver_growth(spent: dict[tuple[str, str, str], list[float]]) -> list[str]:
    """Issue 66's second ratio: each app's driver's CPU per batch in the devices phases (10,000
    devices) against the demo phases (2), per contender: a driver that folds grows with the devices."""
    said = []
    for contender, app in sorted({(c, a) for c, a, _ in spent}):
        demo, devices = spent.get((contender, app, "demo")), spent.get((contender, app, "devices"))
        if demo and devices:
            ratio = statistics.median(devices) / statistics.median(demo)
            said.append(
                f"{app}{', ' + contender if contender else ''}: its driver's CPU per batch "
                f"{statistics.median(devices):.2f} s with the synthetic devices against "
                f"{statistics.median(demo):.2f} s at the demo's: {ratio:.2f}x (issue 66: <= 2x)"
            )
    return said


def quantiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[98]


@dataclass(frozen=True)
class Spent:
    """What the measured app's busiest executor spent in one phase of one contender."""

    turn: int  # the phase's number: the contenders of one turn ran side by side
    contender: str  # its name, without the executor cores
    cores: int
    per_batch: float  # CPU s
    per_row: float  # CPU s per 100,000 rows in
    rows: float  # input rows of a batch, median


# Batches of two phases whose medians differ by more than this do not compare per batch: the
# larger ones (a contender that fell behind) pay each batch's fixed costs over more rows.
LIKE_ROWS = 1.2


def capacity(spent: list[Spent]) -> list[str]:
    """Issue 66's ratio for each turn and contender that ran with one executor and with more: the
    busiest executor's CPU with n against its CPU with 1, per batch and per row in."""
    said = []
    runs = {(s.turn, s.contender, s.cores): s for s in spent}
    for (turn, contender, cores), more in sorted(runs.items()):
        one = runs.get((turn, contender, 1))
        if cores == 1 or one is None:
            continue
        alike = max(one.rows, more.rows) <= LIKE_ROWS * min(one.rows, more.rows)
        line = (
            f"turn {turn + 1}{', ' + contender if contender else ''}: the busiest executor with {cores} "
            f"against 1: {more.per_batch / one.per_batch:.2f}x per batch, {more.per_row / one.per_row:.2f}x "
            "per row in"
        )
        if not alike:
            line += (
                f" (batches of {one.rows:,.0f} and {more.rows:,.0f} rows: not alike, compare per row in, "
                "one contender fell behind)"
            )
        said.append(line)
    return said


def phase(
    apps: Apps,
    name: str,
    devices: list[str],
    args: argparse.Namespace,
    contender: dict[str, Any],
    spent: Callable[[float, float, float], None] = lambda *_: None,
    driven: Callable[[str, float], None] = lambda *_: None,
) -> Iterator[str]:
    """The phase's table rows; `spent` gets the busiest executor's CPU s per batch and per 100,000
    rows in of the app `args.app`, and its median batch's input rows; `driven` each app's driver's
    CPU s per batch."""
    print(f"phase {name}: {len(devices)} synthetic devices", flush=True)
    restarted = time.time()
    # The probe signs as a device of the site; the inventory's own bench devices stay registered.
    apps.converge([PROBE, *(devices or [f"bench-{i}" for i in range(10)])], contender)
    # Without the event log (a contender's spark_history_enabled false, as the role defaults) the
    # batches come from the drivers' progress lines, and their Spark jobs are not known.
    logged = contender.get("spark_history_enabled", True)
    wait_for_batches(apps, restarted, logged)
    time.sleep(args.warmup)
    watch = Watch(apps.lab)
    watch.start()
    rss: dict[str, list[float]] = {app: [] for app in APPS}
    drivers = {app: apps.lab.driver_of(app) for app in APPS}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5):
            for app, (unit, _) in APPS.items():
                rss[app].append(driver_rss_mib(drivers[app], unit))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # The measured app's executors: what each spent while the phase sent; and each driver.
    measured = application_id(apps.event_log(args.app)) if logged else None
    spent_before = executor_cpu(apps.lab, measured) if measured else {}
    drivers_before = {app: driver_cpu_s(drivers[app], unit) for app, (unit, _) in APPS.items()}
    since, cpu = time.time(), CpuMeter()
    sent = produce(apps.lab, devices, args.per_record, args.probe_every, args.seconds)
    until, cpu_share = time.time(), cpu.share()
    spent_after = executor_cpu(apps.lab, measured) if measured else {}
    drivers_spent = {
        app: driver_cpu_s(drivers[app], unit) - drivers_before[app] for app, (unit, _) in APPS.items()
    }
    done.set()
    time.sleep(args.settle)  # the last windows and alerts of the phase
    watch.stop.set()
    sampler.join()
    ended = {
        (device, start): arrived
        for (device, start), arrived in watch.windows.items()
        if since + args.settle <= start + WINDOW_S <= until
    }
    end_to_window = [arrived - (start + WINDOW_S) for (_, start), arrived in ended.items()]
    closing = closing_to_aggregate(ended, sent.records, device_slack(contender))
    to_alert = [watch.alerts[seq] - ts for seq, ts in sent.probes.items() if seq in watch.alerts]
    print(
        f"  sent {sent.readings:,} synthetic readings; {len(end_to_window)} windows ended in the phase "
        f"arrived; {len(to_alert)}/{len(sent.probes)} probe alerts arrived; "
        f"while sending, {cpu_share.said()}",
        flush=True,
    )
    for app in APPS:
        events = apps.event_log(app) if logged else []
        found = batches(events, since, until) if logged else apps.journal_batches(app, since, until)
        walls, jobs = [b.wall_s for b in found], [b.jobs for b in found]
        p50, p99 = quantiles(walls)
        latency = quantiles(end_to_window if app == "sensor_aggregates" else to_alert)
        what = "window end -> aggregate" if app == "sensor_aggregates" else "reading -> alert"
        latency_said = f"{what}: {latency[0]:.1f} s / {latency[1]:.1f} s"
        if app == "sensor_aggregates" and closing:
            closing_p50, closing_p99 = quantiles(closing)
            latency_said += f"; closing record -> aggregate: {closing_p50:.1f} s / {closing_p99:.1f} s"
        rows_in = statistics.median(b.rows for b in found) if found else 0
        if found:
            print(f"  {app}: its driver {drivers_spent[app] / len(found):.2f} CPU s per batch", flush=True)
            driven(app, drivers_spent[app] / len(found))
        if found and logged:
            split = [b.parts() for b in found]
            parts = {k: statistics.median(one[k] for one in split) for k in split[0]}
            print(
                f"  {app}, where a batch goes (medians): "
                + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items())
                + f"; its executors on {', '.join(executor_hosts(events)) or 'none'}",
                flush=True,
            )
        if app == args.app:
            moved, folds = caught_up(apps.journal(app, since), since, until)
            said = f"  {app}: {moved} partitions' folds moved to another worker in {folds} batches"
            if spent_after and found:
                busiest = busiest_executor(spent_before, spent_after)
                rows = sum(b.rows for b in found)
                said += (
                    f"; {len(spent_after)} executors, the busiest {busiest:.1f} CPU s in all, "
                    f"{busiest / len(found):.2f} s per batch, "
                    f"{busiest / rows * 100_000:.2f} s per 100,000 rows in"
                )
                spent(busiest / len(found), busiest / rows * 100_000, rows_in)
            print(said, flush=True)
        jobs_said = (
            f"{statistics.median(jobs) if jobs else 0:.0f} ({min(jobs, default=0)}-{max(jobs, default=0)})"
            if logged
            else "no event log"
        )
        rss_said = (
            f"{statistics.median(rss[app]) if rss[app] else 0:,.0f} / {max(rss[app], default=0):,.0f} MiB"
        )
        yield (
            f"| {name} | {app} | {len(found)} | {rows_in:,.0f} | {p50:.2f} s | {p99:.2f} s | {jobs_said} "
            f"| {latency_said} | {rss_said} | {apps.state_rows(app):,} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300, help="how long each phase measures")
    parser.add_argument("--warmup", type=float, default=60, help="after the apps' first batches")
    parser.add_argument("--settle", type=float, default=40, help="after the phase, for its last outputs")
    parser.add_argument(
        "--devices", type=int, default=10_000, help="synthetic devices (0: the demo phase only)"
    )
    parser.add_argument(
        "--per-record", type=int, default=10, help="readings per synthetic record (1 a second)"
    )
    # 13 s: its out-of-bounds readings, 26 s apart, land 6 s later each time against the 10 s
    # trigger and so sample the whole interval. At 15 s (30 s apart) every one landed at the same
    # moment of it, and reading -> alert measured the bench's start as much as the app.
    parser.add_argument("--probe-every", type=float, default=13, help="seconds between the probe's readings")
    parser.add_argument("--phases", default="demo,devices", help="which phases, in order")
    parser.add_argument(
        "--java-options",
        action="append",
        type=named,
        default=[],
        metavar="NAME=OPTIONS",
        help="a contender whose apps' JVMs run with these options (spark_app_java_options)",
    )
    parser.add_argument(
        "--app",
        default="sensor_aggregates",
        choices=sorted(APPS),
        help="the app whose executors --cores sets and whose busiest executor is measured",
    )
    parser.add_argument(
        "--cores",
        "--aggregates-cores",
        dest="cores",
        default="",
        help="comma-separated executor cores for --app (one executor a core): each contender runs "
        "once with each, e.g. 1,2 for what a second executor divides",
    )
    parser.add_argument(
        "--vars",
        action="append",
        type=named,
        default=[],
        metavar="NAME=JSON",
        help="a contender with these variables over the inventory's, a JSON object, e.g. "
        'slack8={"spark_device_slack_seconds": 8}',
    )
    args = parser.parse_args()
    # Each phase runs once per contender, in turns whose order alternates from phase to phase;
    # without contenders, once as the inventory has it.
    contenders: list[tuple[str, dict[str, Any]]] = [
        (name, {"spark_app_java_options": options}) for name, options in args.java_options
    ] + [(name, json.loads(variables)) for name, variables in args.vars]
    cores_of: dict[str, tuple[str, int]] = {}  # a contender's label -> its name and executor cores
    if args.cores:
        split = [
            (name, int(cores), contender)
            for name, contender in contenders or [("", {})]
            for cores in args.cores.split(",")
        ]
        contenders = [
            (f"{name}, {cores} cores" if name else f"{cores} cores", contender | app_cores(args.app, cores))
            for name, cores, contender in split
        ]
        cores_of = {
            label: (name, cores) for (label, _), (name, cores, _) in zip(contenders, split, strict=True)
        }
    apps = Apps.find()
    rows = []
    spent: list[Spent] = []
    driver_spent: dict[tuple[str, str, str], list[float]] = {}  # (contender, app, phase) -> CPU s a batch
    try:
        for number, name in enumerate(args.phases.split(",")):
            devices = [f"bench-{i}" for i in range(args.devices)] if name == "devices" else []
            for label, contender in (contenders or [("", {})])[:: 1 if number % 2 == 0 else -1]:
                base, cores = cores_of.get(label, (label, 0))

                def keep(
                    per_batch: float,
                    per_row: float,
                    rows_in: float,
                    t: int = number,
                    b: str = base,
                    c: int = cores,
                ) -> None:
                    spent.append(Spent(t, b, c, per_batch, per_row, rows_in))

                def drove(app: str, per_batch: float, p: str = name, b: str = label) -> None:
                    driver_spent.setdefault((b, app, p), []).append(per_batch)

                title = f"{name}, {label}" if label else name
                rows += list(phase(apps, title, devices, args, contender, keep, drove))
    finally:
        print("restoring the spark play as the inventory has it", flush=True)
        apps.restore()
    print(
        f"\nMicro-batch cost on the lab, {args.seconds:.0f} s per phase (trigger 10 s, window 60 s, "
        "the inventory's device slack unless a contender sets it)\n"
    )
    print(
        "| phase | app | batches | input rows (median) | wall p50 | wall p99 | Spark jobs per batch: median "
        "(min-max) | latency p50 / p99 | driver RSS median / max | state rows |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for row in rows:
        print(row)
    for line in driver_growth(driver_spent):
        print(line)
    ratios = capacity(spent)
    if ratios:
        print(
            f"\n{args.app}'s busiest executor, each contender with more executors against 1 "
            "(issue 66: <= 0.6x):"
        )
        for line in ratios:
            print(f"  {line}")


if __name__ == "__main__":
    main()
