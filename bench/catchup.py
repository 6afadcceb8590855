"""How fast sensor_aggregates drains a backlog on the lab, beside Spark only counting the same records.

Needs the demo's lab, converged (`make demo`). The bench:

1. creates `pikit-bench-*` topics (the readings topic's partition count) with ACLs for
   the Spark principal, and fills the readings one with N readings from D devices, 100
   per contract record, one reading a second per device ending now: an outage's backlog;
2. stops the lab's streaming apps and edge agents, so nothing else competes for the CPU;
3. per round, runs on the first driver Pi, with the app unit's own spark-submit line (same
   cores, same Kafka options, same maxOffsetsPerTrigger) and `--trigger available-now`:
   - sensor_aggregates on a fresh checkpoint, writing to the bench topics;
   - the same with `--read-tasks 0`: a read task per partition instead of one per core;
   - bench/spark_count.py, which reads the same records the same way and only counts
     them: the ceiling;
   - bench/spark_count.py --peer, which folds them into plain per-minute windows with
     `from_json` and no validation, state or output: what any parser pays;
   - with `--contenders ...,agg-c2,peer-c2`, the app and the peer on the JVM's own JIT (C2)
     instead of the deployed `spark_app_java_options`' C1 only; with `agg-g1,peer-g1`, on the
     G1 collector instead of its serial one; each otherwise with the deployed options;
   in rotating order;
4. restarts what it stopped and deletes its topics and ACLs.

Each run is timed the same way, from the first batch's plan (`offsets/0` in its
checkpoint) to the last batch's commit (`commits/<last>`), so the JVMs' and the
executors' start-up is left out of both; the wall time from submit to exit is shown
too. Every run must have consumed every record of the topic. Under each run, the app's own
log lines per batch: the wall time of each step of sensor_aggregates' micro-batches.

    .venv/bin/python -m bench.catchup [--readings 2000000] [--devices 100] [--rounds 2] [--contenders KEYS]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

from kafka import KafkaProducer
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from pikit_contract import signing
from pikit_contract.readings import Reading, encode_batch

from bench import eventlog
from bench import lab as lab_
from pikit import REPO

PREFIX = "pikit-bench-"
READINGS = f"{PREFIX}readings"
OUTPUTS = {
    "aggregates": f"{PREFIX}aggregates",
    "latest": f"{PREFIX}latest",
    "late": f"{PREFIX}late",
    "dead-letter": f"{PREFIX}dead-letter",
}
PER_RECORD = 100
APP_UNIT = "spark-app-sensor-aggregates"
CEILING = "count only (ceiling)"
# name -> key (--contenders picks them by key)
CONTENDERS = {
    "sensor_aggregates": "agg",
    "sensor_aggregates, a read task per partition": "agg-wide",
    CEILING: "count",
    "plain peer: from_json + windows": "peer",
    "sensor_aggregates, C2 JIT": "agg-c2",
    "plain peer, C2 JIT": "peer-c2",
    "sensor_aggregates, G1 GC": "agg-g1",
    "plain peer, G1 GC": "peer-g1",
    "sensor_aggregates, huge methods JIT-compiled": "agg-hugejit",
    "plain peer, huge methods JIT-compiled": "peer-hugejit",
    "sensor_aggregates, huge methods interpreted": "agg-hugeint",
    "plain peer, huge methods interpreted": "peer-hugeint",
}
DEFAULT_CONTENDERS = "agg,agg-wide,count,peer"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"


# A contender key's suffix -> the JVM options it runs with instead of the deployed ones
# (spark_app_java_options: C1 only, which a restart pays less for, and the serial collector):
# the JVM's own JIT (C2 after C1), what a long read pays for C1; G1, the JVM's own collector.
def _c2(deployed: list[str]) -> list[str]:
    return [*deployed, "-XX:TieredStopAtLevel=4"]  # the last of a repeated option counts


def _g1(deployed: list[str]) -> list[str]:
    return [*(o for o in deployed if o != "-XX:+UseSerialGC"), "-XX:+UseG1GC"]  # one collector only


def _huge_methods(compiled: bool) -> Callable[[list[str]], list[str]]:
    """Whether the JIT compiles a method of more than 8,000 bytes of bytecode (HotSpot's
    HugeMethodLimit), as Spark's whole-stage code generation writes for the parse."""

    def variant(deployed: list[str]) -> list[str]:
        kept = [o for o in deployed if not o.endswith("DontCompileHugeMethods")]
        return [*kept, f"-XX:{'-' if compiled else '+'}DontCompileHugeMethods"]

    return variant


JVM_VARIANTS: dict[str, Callable[[list[str]], list[str]]] = {
    "-c2": _c2,
    "-g1": _g1,
    "-hugejit": _huge_methods(compiled=True),
    "-hugeint": _huge_methods(compiled=False),
}


def split_jvm_variant(key: str) -> tuple[str, Callable[[list[str]], list[str]] | None]:
    """The contender `key` as the app it runs and the JVM variant its suffix names, if any."""
    for suffix, variant in JVM_VARIANTS.items():
        if key.endswith(suffix):
            return key.removesuffix(suffix), variant
    return key, None


STOPPED = {
    "spark_driver": ["spark-app-sensor-aggregates", "spark-app-anomaly-alerts"],
    "edge": ["edge-agent"],
}


def sh(node: str, *cmd: str, user: str | None = None, stdin: bytes | None = None) -> str:
    who = ["--user", user] if user else []
    result = subprocess.run(
        ["podman", "exec", "-i", *who, node, *cmd], input=stdin, capture_output=True, check=False
    )
    if result.returncode:
        raise RuntimeError(f"{node}: {' '.join(cmd)[:200]}: {result.stderr.decode()[-2000:]}")
    return result.stdout.decode()


class SubmitLine:
    """The app unit's spark-submit line, split where the app's script is."""

    def __init__(self, master: str) -> None:
        unit = sh(master, "systemctl", "cat", APP_UNIT)
        fields = dict(
            line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#")
        )
        self.user = fields["User"]
        tokens = shlex.split(fields["ExecStart"])
        at = next(i for i, t in enumerate(tokens) if t.endswith("/sensor_aggregates.py"))
        self.spark, self.app, self.app_args = tokens[:at], tokens[at], tokens[at + 1 :]
        self.properties = self.app_args[self.app_args.index("--kafka-properties") + 1]
        self.cores = int(self.spark[self.spark.index("--total-executor-cores") + 1])
        # <spark_data_dir>/scratch/sensor_aggregates: the driver's scratch on its Pi's disk.
        checkpoint = self.app_args[self.app_args.index("--checkpoint-dir") + 1]
        self.work = f"{checkpoint.rstrip('/').rsplit('/', 2)[0]}/bench-catchup"
        defaults = sh(master, "cat", lab_.SPARK_DEFAULTS)
        # spark.driver.extraJavaOptions: the deployed spark_app_java_options, the executors' too.
        self.java_options = next(
            (shlex.split(line)[1:] for line in defaults.splitlines() if line.startswith(JAVA_OPTIONS)), []
        )

    def with_jvm(self, cmd: list[str], variant: Callable[[list[str]], list[str]] | None) -> list[str]:
        """`cmd` with the deployed JVM options as `variant` changes them, if there is one."""
        if variant is None:
            return cmd
        options = shlex.join(variant(self.java_options))
        confs = [f"--conf=spark.{side}.extraJavaOptions={options}" for side in ("driver", "executor")]
        return [cmd[0], *confs, *cmd[1:]]

    def aggregates(self, run: str) -> list[str]:
        return [
            *self.spark,
            self.app,
            *self.app_args,
            *self.common(run),
            "--aggregates-topic",
            OUTPUTS["aggregates"],
            "--latest-topic",
            OUTPUTS["latest"],
            "--late-topic",
            OUTPUTS["late"],
            "--dead-letter-topic",
            OUTPUTS["dead-letter"],
            # Each round an app of its own in Kafka: no committed offsets, no state, from the start.
            "--instance",
            f"bench-catchup-{run}",
            "--device-keys",
            f"{self.work}/device-keys.json",
        ]

    def count(self, run: str, *extra: str) -> list[str]:
        return [
            *self.spark,
            f"{self.work}/spark_count.py",
            "--kafka-properties",
            self.properties,
            *self.common(run),
            *extra,
        ]

    def common(self, run: str) -> list[str]:
        return [
            "--readings-topic",
            READINGS,
            "--checkpoint-dir",
            f"{self.work}/{run}/checkpoint",
            "--trigger",
            "available-now",
            "--starting-offsets",
            "earliest",
            "--log-level",
            "INFO",
        ]


def fill(client: dict[str, Any], readings: int, keys: dict[str, bytes]) -> int:
    """The backlog: each device one reading a second until now, signed as the agents sign;
    returns the records written."""
    devices = len(keys)
    producer = KafkaProducer(
        **client, acks="all", linger_ms=20, batch_size=256 * 1024, compression_type="zstd"
    )
    per_device = readings // devices
    now = time.time()
    records = 0
    for start in range(0, per_device, PER_RECORD):
        for d in range(devices):
            device = f"bench-{d}"
            batch = [
                Reading(device, i, "bench", "value", 20.0 + (i * 7 + d) % 50 / 10, "C", now - per_device + i)
                for i in range(start, min(start + PER_RECORD, per_device))
            ]
            value = encode_batch(device, batch)
            headers = signing.headers(device, keys[device], value)
            producer.send(READINGS, key=device.encode(), value=value, headers=headers)
            records += 1
    producer.flush()
    producer.close()
    return records


@contextlib.contextmanager
def bench_topics(admin: KafkaAdminClient, partitions: int, principal: str) -> Iterator[None]:
    topics = [NewTopic(READINGS, partitions, 3)] + [NewTopic(t, 1, 3) for t in OUTPUTS.values()]
    admin.create_topics(topics)
    pattern = ResourcePattern(ResourceType.TOPIC, PREFIX, ACLResourcePatternType.PREFIXED)
    ops = (ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE)
    acls = [ACL(f"User:{principal}", "*", op, ACLPermissionType.ALLOW, pattern) for op in ops]
    admin.create_acls(acls)
    try:
        yield
    finally:
        admin.delete_acls(
            [
                ACLFilter(
                    f"User:{principal}",
                    "*",
                    ACLOperation.ANY,
                    ACLPermissionType.ANY,
                    ResourcePatternFilter(ResourceType.TOPIC, PREFIX, ACLResourcePatternType.PREFIXED),
                )
            ]
        )
        admin.delete_topics([t.name for t in topics])


@contextlib.contextmanager
def quiet_lab(g: dict[str, list[str]]) -> Iterator[None]:
    stopped = [(node, unit) for group, units in STOPPED.items() for node in g[group] for unit in units]
    for node, unit in stopped:
        sh(node, "systemctl", "stop", unit)
    try:
        yield
    finally:
        for node, unit in stopped:
            sh(node, "systemctl", "start", unit)


def drained(master: str, checkpoint: str) -> tuple[float, int]:
    """Seconds from batch 0's plan to the last batch's commit, and the records its offsets cover."""
    stamps = {}
    for line in sh(
        master,
        "find",
        f"{checkpoint}/stream/offsets",
        f"{checkpoint}/stream/commits",
        "-type",
        "f",
        "-printf",
        "%p %T@\n",
    ).splitlines():
        path, stamp = line.rsplit(" ", 1)
        kind, name = path.split("/")[-2:]
        if name.isdigit():
            stamps[(kind, int(name))] = float(stamp)
    last = max(n for kind, n in stamps if kind == "commits")
    offsets = json.loads(sh(master, "cat", f"{checkpoint}/stream/offsets/{last}").splitlines()[2])
    return stamps[("commits", last)] - stamps[("offsets", 0)], sum(offsets[READINGS].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readings", type=int, default=2_000_000)
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--stages", action="store_true", help="also print each run's stages from its Spark event log"
    )
    parser.add_argument(
        "--contenders",
        default=DEFAULT_CONTENDERS,
        help=f"keys, comma-separated, of {', '.join(CONTENDERS.values())} (count is always run)",
    )
    args = parser.parse_args()
    chosen = {"count", *args.contenders.split(",")}
    if unknown := chosen - set(CONTENDERS.values()):
        parser.error(f"unknown contenders: {', '.join(sorted(unknown))}")
    for name in [n for n, key in CONTENDERS.items() if key not in chosen]:
        del CONTENDERS[name]
    lab = lab_.find()
    g, client, master = lab.groups, lab.client, lab.driver
    submit = SubmitLine(master)
    admin = KafkaAdminClient(**client)
    partitions = len(admin.describe_topics([lab.topics["readings"]])[0]["partitions"])
    principal = "spark"  # kafka_spark_principal's default, which the lab keeps
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in CONTENDERS}
    with bench_topics(admin, partitions, principal):
        keys = lab.device_keys([f"bench-{d}" for d in range(args.devices)])
        records = fill(client, args.readings, keys)
        readings = args.readings // args.devices * args.devices
        print(
            f"filled {READINGS}: {records:,} records, {readings:,} readings, {partitions} partitions",
            flush=True,
        )
        sh(master, "mkdir", "-p", submit.work, user=submit.user)
        sh(
            master,
            "sh",
            "-c",
            f"cat > {submit.work}/spark_count.py",
            user=submit.user,
            stdin=(REPO / "bench/spark_count.py").read_bytes(),
        )
        # The app checks the bench devices' signatures as it checks the site's: its own registry.
        sh(
            master,
            "sh",
            "-c",
            f"cat > {submit.work}/device-keys.json",
            user=submit.user,
            stdin=json.dumps({device: key.hex() for device, key in keys.items()}).encode(),
        )
        with quiet_lab(g):
            for r in range(args.rounds):
                order = list(CONTENDERS)
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    key = CONTENDERS[name]
                    run = f"r{r}-{key}-{int(time.time())}"
                    app, variant = split_jvm_variant(key)
                    cmd = {
                        "agg": submit.aggregates(run),
                        "agg-wide": [*submit.aggregates(run), "--read-tasks", "0"],
                        "count": submit.count(run),
                        "peer": submit.count(run, "--peer"),
                    }[app]
                    cmd = submit.with_jvm(cmd, variant)
                    if args.stages:
                        sh(master, "mkdir", "-p", f"{submit.work}/{run}/events", user=submit.user)
                        events = {
                            "enabled": "true",
                            "dir": f"file://{submit.work}/{run}/events",
                            "compress": "false",  # read here as JSON lines
                            "rolling.enabled": "false",
                        }
                        cmd[1:1] = [f"--conf=spark.eventLog.{key}={value}" for key, value in events.items()]
                    started = time.monotonic()
                    log = f"{submit.work}/{run}.log"
                    sh(master, "sh", "-c", f"cd /tmp && {shlex.join(cmd)} > {log} 2>&1", user=submit.user)
                    wall = time.monotonic() - started
                    for line in sh(
                        master, "sh", "-c", f"grep -E 'batch [0-9]+: ' {log} || true"
                    ).splitlines():
                        print(f"  {line}", flush=True)  # each batch's steps, from the app's own log
                    if args.stages:
                        log_text = sh(master, "sh", "-c", f"cat {submit.work}/{run}/events/*")
                        print(eventlog.table(log_text.splitlines()), flush=True)
                    seconds, consumed = drained(master, f"{submit.work}/{run}/checkpoint")
                    assert consumed == records, f"{name} consumed {consumed} of {records} records"
                    results[name].append((seconds, wall))
                    print(
                        f"round {r + 1}: {name}: {readings / seconds:,.0f} readings/s "
                        f"(drain {seconds:.1f} s, wall {wall:.1f} s)",
                        flush=True,
                    )
        sh(master, "rm", "-rf", submit.work, user=submit.user)
    report(readings, records, submit.cores, args.rounds, results)


def report(
    readings: int, records: int, cores: int, rounds: int, results: dict[str, list[tuple[float, float]]]
) -> None:
    print(
        f"\n{readings:,} readings in {records:,} records, {cores} executor cores, maxOffsetsPerTrigger "
        f"as deployed, {rounds} rounds; drain = first batch planned to last batch committed\n"
    )
    print(
        "| query | readings/s median | min | max | per executor core | drain median | wall median "
        "| vs ceiling |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    ceiling = statistics.median(readings / s for s, _ in results[CEILING])
    for name, runs in results.items():
        rates = [readings / s for s, _ in runs]
        median = statistics.median(rates)
        print(
            f"| {name} | {median:,.0f} | {min(rates):,.0f} | {max(rates):,.0f} | {median / cores:,.0f} "
            f"| {statistics.median(s for s, _ in runs):.1f} s "
            f"| {statistics.median(w for _, w in runs):.1f} s "
            f"| {median / ceiling:.2f} |"
        )


if __name__ == "__main__":
    main()
