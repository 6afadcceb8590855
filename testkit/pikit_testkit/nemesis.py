"""The nemesis: a seeded, randomized schedule of faults against a whole lab site, one at a
time while the agents produce, and how long the site takes to heal from each.

A fault's **recovery time** runs from its end (the brokers started again, the cable back, the
kill done) until every streaming query has committed a new micro-batch (a file in its
checkpoint's `commits/`) and every agent's spool has drained. A recovery longer than the
bound is a stall, and fails the run. The seed is printed first, so that a failure replays:

    python -m pikit_testkit.nemesis --seed 1234 --faults 6      # on make demo's lab

Exactness is not judged here: the caller recomputes the output from the raw topic afterwards
(tests/e2e, pikit_testkit/pipeline_model.py).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pikit_contract.failpoints import SINK_BEFORE_COMMIT, SINK_POINTS

from pikit import REPO
from pikit.site_model import driver_pis

BROKERS_KILLED = "brokers-killed"
BROKER_FROZEN = "broker-frozen"
DRIVER_CUT = "driver-cut"
DRIVER_KILLED = "driver-killed"
EXECUTOR_KILLED = "executor-killed"
COMMIT_KILLED = "commit-killed"
COMMIT_HELD = "commit-held-brokers-killed"
DEVICE_CUT = "device-cut"
AGENT_KILLED = "agent-killed"
DISK_FILLED = "disk-filled"
MASTER_KILLED = "master-killed"
MASTER_DOWN = "master-down"
PI_LOST = "pi-lost"
KINDS = (
    BROKERS_KILLED,
    BROKER_FROZEN,
    DRIVER_CUT,
    DRIVER_KILLED,
    EXECUTOR_KILLED,
    COMMIT_KILLED,
    COMMIT_HELD,
    DEVICE_CUT,
    AGENT_KILLED,
    DISK_FILLED,
    MASTER_KILLED,
    MASTER_DOWN,
    PI_LOST,
)
# Each kind's bound on its recovery, which the suites assert (a recovery past it fails the run,
# however it ends). Issue 31 asked for every recovery within a minute: so it is for the brokers, the
# network, an agent, a disk, a hung (gray) broker and the Spark master (the apps go on without it,
# and it takes them back: spark.deploy.recoveryMode). A fault that kills a driver or an executor is
# a cold start instead: a new JVM starts, registers, rebuilds its query from the checkpoint and
# runs a first batch. bench.restart_cost measured a driver killed -9
# back to its first commit in 23-25 s on an idle lab; COLD_START_S leaves room for the two busy
# cores of CI, where make test's second lane runs molecule beside the fault suite.
FAST_S = 60.0
COLD_START_S = 120.0
RECOVERY_BOUNDS = {
    BROKERS_KILLED: FAST_S,
    BROKER_FROZEN: FAST_S,
    COMMIT_HELD: FAST_S,
    DRIVER_CUT: FAST_S,
    DEVICE_CUT: FAST_S,
    AGENT_KILLED: FAST_S,
    DISK_FILLED: FAST_S,
    DRIVER_KILLED: COLD_START_S,
    COMMIT_KILLED: COLD_START_S,
    EXECUTOR_KILLED: COLD_START_S,
    MASTER_KILLED: FAST_S,
    MASTER_DOWN: FAST_S,
    # Issue 66: every output again within 120 s of a Pi's loss, and of its replacement's end.
    PI_LOST: COLD_START_S,
}
# After a lost Pi's replacement, how long its pauses are watched: a new master's drivers each exit
# after three looks 10 s apart that do not list their app, and register anew
# (spark_apps/pikit_spark/standalone_master.py).
PI_SETTLE_S = 60.0
# Faults the queries must keep committing through, not only recover from: one broker hung (RF 3,
# min ISR 2), one broker's disk filled to its guard (the topics' bounds leave it room), the Spark
# master gone (a running app needs it for nothing but new executors).
RIDDEN_THROUGH = (BROKER_FROZEN, DISK_FILLED, MASTER_KILLED, MASTER_DOWN)
# Each agent must have a send acknowledged at least every AGENT_WAIT_S through every fault but those
# that leave a partition fewer than two live replicas (RF 3, min ISR 2: see agents_delivering).
AGENT_WAIT_S = FAST_S
# In every schedule, however short: where issue 31's hang lived.
ALWAYS = (COMMIT_HELD, COMMIT_KILLED)
# The outage of issue 31: every broker killed -9 while a batch's commit is in flight.
COMMIT_HELD_OUTAGE_S = 90.0
CHECKPOINTS = "/srv/pikit/spark/scratch"  # spark_data_dir/scratch on the lab: each driver's own
MASTER_UNIT = "spark-master"
SPOOL = "/srv/pikit/edge-agent/spool"  # edge_agent_spool_dir on the lab
DRAINED_DEPTH = 30  # readings; a round or two of two sensors: what a healthy agent holds
# A broker's data disk (inventory/lab: lab_tmpfs) and the share at which the kit calls it full:
# kafka_disk_warn_share and monitoring_disk_share (DiskPastGuard), 0.85 by default.
KAFKA_DISK = "/srv/pikit/kafka"
DISK_GUARD_SHARE = 0.85


@dataclass(frozen=True)
class SiteNodes:
    """The lab's nodes by part: the names a schedule draws from (container name = host name)."""

    brokers: tuple[str, ...]
    workers: tuple[str, ...]
    master: str
    edges: tuple[str, ...]
    apps: tuple[str, ...]  # the first one's sink is where the commit faults land
    addresses: dict[str, str] = field(default_factory=dict)
    # The apps' driver Pis (pikit.site_model.driver_pis): one holds each app, the others stand by
    # (spark_apps/pikit_spark/leadership.py).
    drivers: tuple[str, ...] = ()

    def driver_nodes(self) -> tuple[str, ...]:
        return self.drivers

    def cluster_pis(self) -> tuple[str, ...]:
        """Every Pi of the cluster (not the devices): any of them may be lost for good."""
        return tuple(sorted({*self.brokers, *self.workers, *self.drivers, self.master}))

    def driver_of(self, app: str) -> str:
        """The node whose driver of `app` committed last: the active one (a standby commits nothing)."""
        newest: dict[str, float] = {}
        for node in self.driver_nodes():
            with contextlib.suppress(Exception):
                commits = f"find {CHECKPOINTS}/{app} -path '*/commits/*' -printf '%T@\\n'"
                found = sh(node, commits, check=False)
                newest[node] = max(map(float, found.split()), default=0.0)
        if not newest or max(newest.values()) == 0.0:
            raise LookupError(f"no driver of {app} has committed on {', '.join(self.driver_nodes())}")
        return max(newest, key=lambda node: newest[node])

    @classmethod
    def from_inventory(cls, inventory: Path, apps: tuple[str, ...]) -> SiteNodes:
        listed = subprocess.run(
            [str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(inventory), "--list"],
            capture_output=True,
            text=True,
            check=True,
        )
        data = json.loads(listed.stdout)

        def group(name: str) -> tuple[str, ...]:
            return tuple(sorted(data.get(name, {}).get("hosts", [])))

        hostvars = data["_meta"]["hostvars"]
        (master,) = group("spark_master")
        return cls(
            brokers=group("kafka_broker"),
            workers=group("spark_worker"),
            master=master,
            edges=group("edge"),
            apps=apps,
            addresses={h: v["ansible_host"] for h, v in hostvars.items()},
            # Ranked as the inventory lists them, not sorted.
            drivers=tuple(driver_pis({name: listing.get("hosts", []) for name, listing in data.items()})),
        )


@dataclass(frozen=True)
class Fault:
    kind: str
    targets: tuple[str, ...]  # nodes, or for the app kinds the app
    seconds: float  # how long it lasts; 0 for a kill that systemd answers by itself
    quiet: float  # calm before it starts: each fault lands at a random moment
    point: str = ""  # the sink failpoint, for the commit kinds

    def __str__(self) -> str:
        what = f"{self.kind} {','.join(self.targets)}"
        if self.point:
            what += f" at {self.point}"
        return what + (f" for {self.seconds:.0f}s" if self.seconds else "")


def schedule(
    seed: int,
    count: int,
    site: SiteNodes,
    *,
    longest: float = 180.0,
    kinds: tuple[str, ...] = KINDS,
    always: tuple[str, ...] = ALWAYS,
) -> list[Fault]:
    """`count` faults of `kinds` drawn from `seed`: the `always` kinds in any schedule, every kind
    once a schedule is long enough, the rest at random, in a random order."""
    rng = random.Random(seed)
    chosen = list(kinds) if count >= len(kinds) else list(always)
    chosen = chosen[:count] + [rng.choice(kinds) for _ in range(count - len(chosen))]
    rng.shuffle(chosen)
    return [_draw(kind, rng, site, longest) for kind in chosen]


def _draw(kind: str, rng: random.Random, site: SiteNodes, longest: float) -> Fault:
    quiet = round(rng.uniform(5, 30), 1)
    if kind == BROKERS_KILLED:
        brokers = tuple(sorted(rng.sample(site.brokers, rng.randint(1, len(site.brokers)))))
        return Fault(kind, brokers, round(rng.uniform(5, longest)), quiet)
    if kind == BROKER_FROZEN:  # 30 s at least: past the controller's fencing of the broker
        return Fault(
            kind, (rng.choice(site.brokers),), round(rng.uniform(30, max(30.0, min(90.0, longest)))), quiet
        )
    # The node of the first app's active driver, found when the fault lands: it moves on a takeover.
    if kind == DRIVER_CUT:
        return Fault(kind, site.apps[:1], round(rng.uniform(20, 90)), quiet)
    if kind == DRIVER_KILLED:
        return Fault(kind, (rng.choice(site.apps),), 0, quiet)
    if kind == EXECUTOR_KILLED:
        return Fault(kind, (rng.choice(site.workers),), 0, quiet)
    # The first app's sink commits whenever a window closes, within a minute; the alerts app's
    # only when it alerts, which may not happen for as long.
    if kind == COMMIT_KILLED:
        return Fault(kind, site.apps[:1], 0, quiet, rng.choice(SINK_POINTS))
    if kind == COMMIT_HELD:
        return Fault(kind, site.apps[:1], COMMIT_HELD_OUTAGE_S, quiet, SINK_BEFORE_COMMIT)
    if kind == DEVICE_CUT:
        return Fault(kind, (rng.choice(site.edges),), round(rng.uniform(20, 120)), quiet)
    if kind == AGENT_KILLED:
        return Fault(kind, (rng.choice(site.edges),), 0, quiet)
    if kind == DISK_FILLED:
        return Fault(kind, (rng.choice(site.brokers),), round(rng.uniform(30, 120)), quiet)
    # The apps' drivers and executors go on without the master; killed, systemd restarts it,
    # stopped, it stays down for the fault's length; either way it takes the apps back.
    if kind == MASTER_KILLED:
        return Fault(kind, (site.master,), 0, quiet)
    if kind == MASTER_DOWN:
        return Fault(kind, (site.master,), round(rng.uniform(5, 60)), quiet)
    # Lost for good, disk and all, then re-flashed and provisioned: its replacement ends the fault.
    if kind == PI_LOST:
        return Fault(kind, (rng.choice(site.cluster_pis()),), 0, quiet)
    raise ValueError(f"unknown fault kind {kind}")


@dataclass(frozen=True)
class PiLifecycle:
    """How the lab loses a Pi for good and replaces it (the re-flash path and site.yml): the
    suite's, which holds the lab and the playbooks; the nemesis only says when."""

    lose: Callable[[str], None]
    replace: Callable[[str], object]  # what it returns is not read


@dataclass(frozen=True)
class Recovery:
    fault: Fault
    ended: float  # Unix time the fault ended
    seconds: float  # until every query committed a batch and every agent drained
    # For a fault the apps must ride through (a frozen broker): each app's longest time
    # without a committed micro-batch while it lasted.
    pauses: dict[str, float] = field(default_factory=dict)
    # For a fault the agents must deliver through: each agent's longest time without an
    # acknowledged send, from before the fault until its first acknowledgement after it.
    agent_waits: dict[str, float] = field(default_factory=dict)


# The longest any of the nemesis' commands on a node may take: a look at a journal, a kill, a flag.
# A node that does not answer in this time fails the command rather than hanging the run.
SH_TIMEOUT_S = 120.0


def sh(node: str, script: str, check: bool = True, timeout: float = SH_TIMEOUT_S) -> str:
    proc = subprocess.run(
        ["podman", "exec", node, "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"{node}: {script}: {proc.stderr.strip()}")
    return proc.stdout


def netns(node: str, *argv: str) -> str:
    """A command in the node's network namespace, run from the host, as a pulled cable is."""
    pid = subprocess.run(
        ["podman", "inspect", "-f", "{{.State.Pid}}", node], capture_output=True, text=True, check=True
    ).stdout.strip()
    return subprocess.run(
        ["nsenter", "-t", pid, "-n", *argv], capture_output=True, text=True, check=True
    ).stdout


@contextlib.contextmanager
def cable_pulled(node: str) -> Iterator[None]:
    routes = netns(node, "ip", "route", "show").splitlines()
    netns(node, "ip", "link", "set", "eth0", "down")
    try:
        yield
    finally:
        netns(node, "ip", "link", "set", "eth0", "up")
        for route in routes:
            netns(node, "ip", "route", "replace", *route.split())


@contextlib.contextmanager
def disk_filled(broker: str, share: float = DISK_GUARD_SHARE) -> Iterator[None]:
    """The broker's data disk filled to `share` by a file beside Kafka's data, as other
    files on a Pi's card would; removed at the end."""
    filler = f"{KAFKA_DISK}/nemesis-filler"
    size, used = map(int, sh(broker, f"df -B1 --output=size,used {KAFKA_DISK} | tail -1").split())
    if (fill := int(size * share) - used) > 0:  # fallocate refuses a length of 0
        sh(broker, f"fallocate -l {fill} {filler}")
    try:
        yield
    finally:
        sh(broker, f"rm -f {filler}")


# What an app's journal says about a slow recovery: the kit's own step and sink lines, and every
# warning or error (Spark's offset reader, kafka-python's timeouts).
TELLING = re.compile(r"\bpikit[.:]|\bWARN(ING)?\b|\bERROR\b")


def journal_digest(text: str, limit: int = 25, width: int = 240) -> list[str]:
    """The last `limit` telling lines of a journal, each cut to `width` characters. A message
    said over and over (a client retrying a broker ten times a second) counts once, at its last
    saying: in the long nemesis it filled the whole digest."""
    last: dict[str, str] = {}
    for line in text.splitlines():
        if TELLING.search(line):
            said = re.sub(r"\d+", "#", line.split("]: ", 1)[-1])
            last.pop(said, None)
            last[said] = line
    return [line[:width] for line in list(last.values())[-limit:]]


def apps_journal(
    site: SiteNodes, since: float, until: float | None = None, output: str = "short-precise"
) -> str:
    """The streaming apps' journals on every driver Pi from `since` (to `until`), epoch seconds,
    printed as journalctl's `output` says."""
    units = " ".join(f"-u {unit_of(app)}" for app in site.apps)
    window = f"--since @{since:.0f}" + (f" --until @{until:.0f}" if until is not None else "")
    journals, errors = [], []
    for node in site.driver_nodes():
        try:
            journals.append(sh(node, f"journalctl {units} {window} -o {output} --no-pager", check=False))
        except Exception as exc:  # a node cut off or down: the others' journals still tell
            errors.append(exc)
    if errors and not journals:
        raise errors[-1]
    return "".join(journals)


def progress_times(journal: str, app: str) -> list[float]:
    """The times of the app's progress lines in a journal printed `-o short-unix`."""
    marker = f" query {app} batch "
    return [float(line.split(" ", 1)[0]) for line in journal.splitlines() if marker in line]


def unit_of(app: str) -> str:
    return "spark-app-" + app.replace("_", "-")


def wait(what: str, check: Callable[[], bool], bound: float, every: float = 1.0) -> float:
    """When `check` first held, within `bound` seconds; errors count as not yet."""
    deadline = time.time() + bound
    while time.time() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return time.time()
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {bound:.0f}s")


def agent_metric(address: str, name: str) -> float:
    """One unlabelled sample of an agent's metrics page (edge_agent/metrics.py)."""
    with urllib.request.urlopen(f"http://{address}:9108/metrics", timeout=5) as response:
        return sample(response.read().decode(), name)


def sample(page: str, name: str) -> float:
    """The value of the unlabelled metric `name` on a Prometheus text page; KeyError if absent."""
    for line in page.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise KeyError(f"no sample of {name} on the page")


class AckWatch:
    """Each agent's acknowledged sends (`edge_agent_last_success_timestamp_seconds`), looked up
    every `every` seconds by a thread of its own while a fault lasts and the site recovers. An agent
    acknowledges a round every second or two while it delivers; the spool depth alone cannot tell
    a slow agent from a stuck one that had little to send."""

    def __init__(self, addresses: dict[str, str], every: float = 1.0) -> None:
        self.addresses = addresses  # agent -> where its metrics page listens
        self.every = every
        self.acks: dict[str, set[float]] = {edge: set() for edge in addresses}
        self.last_look = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ack-watch", daemon=True)

    def __enter__(self) -> AckWatch:
        self._look()  # the acknowledgement before the fault
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._look()

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            self._look()

    def _look(self) -> None:
        for edge, address in self.addresses.items():
            with contextlib.suppress(Exception):  # a page that does not answer tells nothing new
                self.acks[edge].add(agent_metric(address, "edge_agent_last_success_timestamp_seconds"))
        self.last_look = time.time()

    def longest_waits(self, start: float, end: float) -> dict[str, float]:
        """Each agent's longest time without an acknowledged send, from its last one before `start`
        to its first one after `end` (or the last look, if none came)."""
        waits = {}
        for edge, acks in self.acks.items():
            seen = sorted(acks)
            before = [a for a in seen if a <= start]
            after = [a for a in seen if a >= end]
            moments = [
                before[-1] if before else start,
                *(a for a in seen if start < a < end),
                after[0] if after else self.last_look,
            ]
            waits[edge] = max(b - a for a, b in itertools.pairwise(moments))
        return waits


class Nemesis:
    def __init__(
        self,
        site: SiteNodes,
        bound: float = 300.0,
        log: Callable[[str], None] = print,
        journals: Path | None = None,
        slow: float = 60.0,
        pis: PiLifecycle | None = None,
    ) -> None:
        self.site = site
        self.pis = pis  # for PI_LOST
        self.bound = bound  # past it, a recovery is a stall
        self.log = log
        # Where the apps' journals of a recovery slower than `slow` go, to read why afterwards.
        self.journals = journals
        self.slow = slow
        self.last_to_flow = ""  # the query or agent that flowed again last, after the last fault

    def run(self, faults: list[Fault]) -> list[Recovery]:
        self.wait_recovered(time.time() - 1)  # start from a site that flows
        done = []
        for number, fault in enumerate(faults, 1):
            time.sleep(fault.quiet)
            watched = agents_delivering(fault, self.site.edges)
            # A lost Pi's agents are watched through its replacement too: site.yml runs on the
            # whole site while they send.
            with self.ack_watch(watched) if watched else contextlib.nullcontext() as acks:
                started = time.time()
                self.inflict(fault)
                ended = time.time()
                took = self.recovered(number, started, ended) - ended
                if fault.kind == PI_LOST:
                    # Two recoveries, each within the bound: the loss's, then the replacement's,
                    # which ends the fault.
                    self.log(f"[nemesis] {number}: flowing {took:.0f}s after {fault.targets[0]} was lost")
                    ended, took = self.replaced(number, fault.targets[0], ended, took)
            agent_waits = acks.longest_waits(started, ended) if acks is not None else {}
            pauses = self.longest_pause(started, ended) if fault.kind in RIDDEN_THROUGH else {}
            done.append(Recovery(fault, ended, took, pauses, agent_waits))
            if took > self.slow:
                self.keep_journals(number, started, ended + took)
            recovered = (
                f"the longest of its takeover, the flow after its replacement and its pauses {took:.0f}s"
                if fault.kind == PI_LOST
                else f"recovered {took:.0f}s after its end ({self.last_to_flow} last)"
            )
            self.log(
                f"[nemesis] {number}/{len(faults)} {fault}: lasted {ended - started:.0f}s, {recovered}"
                + (f"; longest pause meanwhile {_seconds(pauses)}" if pauses else "")
                + (
                    f"; the agents' longest wait for an acknowledgement {_seconds(agent_waits)}"
                    if agent_waits
                    else ""
                )
            )
        return done

    def recovered(self, number: int, started: float, ended: float) -> float:
        """When the site flowed again after `ended`; a stall keeps the apps' journals and raises."""
        try:
            return self.wait_recovered(ended)
        except TimeoutError:
            self.keep_journals(number, started, time.time())  # a stall: the evidence first
            raise

    def replaced(self, number: int, pi: str, lost: float, takeover: float) -> tuple[float, float]:
        """A lost Pi replaced, once the site flowed again without it. When the replacement ended,
        and the fault's recovery: the longest of the takeover, the time until the site flowed
        again after the replacement (a broker rejoining), and any app's longest pause from the
        loss until PI_SETTLE_S after the replacement (drivers that register anew with a new master)."""
        assert self.pis is not None  # inflict refused PI_LOST without it
        started = time.time()
        self.pis.replace(pi)
        ended = time.time()
        back = self.recovered(number, started, ended) - ended
        time.sleep(max(0.0, ended + PI_SETTLE_S - time.time()))
        pauses = self.longest_pause(lost, time.time())
        self.log(
            f"[nemesis] {number}: {pi} replaced in {ended - started:.0f}s, flowing {back:.0f}s after; "
            f"the longest pause since the loss {_seconds(pauses)}"
        )
        return ended, max(takeover, back, *pauses.values())

    def inflict(self, fault: Fault) -> None:
        kind, targets = fault.kind, fault.targets
        if kind == BROKERS_KILLED:
            self.down(targets, "kafka", fault.seconds)
        elif kind == BROKER_FROZEN:
            (broker,) = targets
            sh(broker, "systemctl kill --signal=SIGSTOP kafka")
            try:
                time.sleep(fault.seconds)
            finally:
                sh(broker, "systemctl kill --signal=SIGCONT kafka")
        elif kind == DRIVER_CUT:
            with cable_pulled(self.site.driver_of(targets[0])):
                time.sleep(fault.seconds)
        elif kind == DEVICE_CUT:
            with cable_pulled(targets[0]):
                time.sleep(fault.seconds)
        elif kind == DRIVER_KILLED:
            sh(self.site.driver_of(targets[0]), f"systemctl kill --signal=KILL {unit_of(targets[0])}")
        elif kind == EXECUTOR_KILLED:
            self.kill_an_executor(targets[0])
        elif kind == AGENT_KILLED:
            sh(targets[0], "systemctl kill --signal=KILL edge-agent")
        elif kind == COMMIT_KILLED:
            self.arm(targets[0], fault.point, "")
        elif kind == DISK_FILLED:
            with disk_filled(targets[0]):
                time.sleep(fault.seconds)
        elif kind == MASTER_KILLED:
            sh(targets[0], f"systemctl kill --signal=KILL {MASTER_UNIT}")
        elif kind == MASTER_DOWN:
            self.down(targets, MASTER_UNIT, fault.seconds)
        elif kind == PI_LOST:
            if self.pis is None:
                raise ValueError(f"{PI_LOST} needs a lab that re-flashes a Pi (the e2e suite's)")
            self.pis.lose(targets[0])
        elif kind == COMMIT_HELD:
            # Held before its commit while every broker dies: the commit is in flight as they go.
            self.arm(targets[0], fault.point, "hold 20")
            self.down(self.site.brokers, "kafka", fault.seconds)
        else:
            raise ValueError(f"unknown fault kind {kind}")

    def keep_journals(self, number: int, start: float, end: float) -> None:
        """The apps' journals from a fault's start to its recovery, in `journals`/fault-N.log.
        Evidence only: a journal that cannot be read must not fail the run."""
        if self.journals is None:
            return
        with contextlib.suppress(Exception):
            text = apps_journal(self.site, start - 5, end + 5)
            path = self.journals / f"fault-{number}.log"
            path.write_text(text)
            self.log(f"[nemesis] fault {number} took over {self.slow:.0f}s: the apps' journals in {path}")
            # CI keeps what a run prints, not its files: the lines that say why go along.
            for line in journal_digest(text):
                self.log(f"  | {line}")

    def kill_an_executor(self, worker: str) -> None:
        """An executor on `worker`, or, where the apps run none there now (Spark places them), on
        another worker: pkill finds none is not a fault landed."""
        # "[C]oarse": the pattern must not match the shell that runs pkill, whose command line holds it.
        kill = "pkill -KILL -f '[C]oarseGrainedExecutorBackend' && echo killed"
        for node in (worker, *(w for w in self.site.workers if w != worker)):
            if not sh(node, kill, check=False).strip():
                continue
            if node != worker:
                self.log(f"[nemesis] no executor on {worker}: killed one on {node}")
            return
        raise RuntimeError(f"no executor runs on any worker ({', '.join(self.site.workers)})")

    def down(self, nodes: tuple[str, ...], unit: str, seconds: float) -> None:
        """`unit` killed -9 on each node and kept down for `seconds`, then started on all at once."""
        # Stopped as well as killed: Restart= would otherwise start them again at once.
        for node in nodes:
            sh(node, f"systemctl kill --signal=KILL {unit}; systemctl stop {unit}")
        try:
            time.sleep(seconds)
        finally:
            starts = [subprocess.Popen(["podman", "exec", n, "systemctl", "start", unit]) for n in nodes]
            failed = [n for n, p in zip(nodes, starts, strict=True) if p.wait() != 0]
            if failed:
                raise RuntimeError(f"{unit} did not start again on {failed}")

    def arm(self, app: str, point: str, action: str) -> str:
        """Arm a sink failpoint in the app's checkpoint directory where its commits run, and wait
        until one fires: on the active driver's Pi (an app that commits its batches there) and on
        every worker (an app whose partitions' tasks commit theirs: pikit_spark/partition_fold.py),
        then disarm the rest, and say on which node it fired. Not on a standby driver's Pi: it
        would fire on a takeover, much later."""
        flags = f"{CHECKPOINTS}/{app}/failpoints"
        flag = f"{flags}/{point}"
        nodes = list(dict.fromkeys((self.site.driver_of(app), *self.site.workers)))
        # The app's own directory too, where a Pi's driver has not made it yet: made by root, a
        # standby driver there could not write its checkpoint when it took the app over.
        for node in nodes:
            sh(
                node,
                f"install -d -o spark -g spark {CHECKPOINTS}/{app} {flags} && "
                f"printf %s {shlex.quote(action)} > {flag} && chown spark:spark {flag}",
            )

        where: list[str] = []

        def fired() -> bool:
            where.extend(node for node in nodes if not sh(node, f"ls {flag} 2>/dev/null", False))
            return bool(where)

        try:
            wait(f"{app}'s failpoint {point}", fired, 180)
        finally:
            for node in nodes:
                sh(node, f"rm -f {flag}", False)
        return where[0]

    # --- recovery ---------------------------------------------------------------------------

    def commits_since(self, app: str, moment: float) -> list[float]:
        """When the app's query committed each micro-batch after `moment` (its checkpoint), on
        whichever driver Pi held it; a node cut off or down tells nothing."""
        found: list[str] = []
        for node in self.site.driver_nodes():
            with contextlib.suppress(Exception):
                found += sh(
                    node,
                    f"find {CHECKPOINTS}/{app} -path '*/commits/*' -newermt @{moment:.3f} -printf '%T@\\n'",
                    check=False,
                ).split()
        return sorted(map(float, found))

    def committed_since(self, app: str, moment: float) -> float | None:
        return next(iter(self.commits_since(app, moment)), None)

    def longest_pause(self, start: float, end: float) -> dict[str, float]:
        """Each app's longest time without a committed micro-batch between `start` and `end`. A
        driver that starts again empties its checkpoint (pikit_spark/app.py: Spark's checkpoint is
        scratch), and with it the commits before; its journal's progress lines still tell them."""
        # Spark reports a batch's progress once it is committed, and pikit_spark/progress.py logs
        # it for each batch that read something. A journal that cannot be read tells nothing.
        journal = ""
        with contextlib.suppress(Exception):
            journal = apps_journal(self.site, start, output="short-unix")
        pauses = {}
        for app in self.site.apps:
            logged = (t for t in progress_times(journal, app) if t > start)
            committed = {*self.commits_since(app, start), *logged}
            moments = [start, *sorted(t for t in committed if t < end), end]
            pauses[app] = max(b - a for a, b in itertools.pairwise(moments))
        return pauses

    def spool_depth(self, edge: str) -> float:
        return agent_metric(self.site.addresses.get(edge, edge), "edge_agent_spool_depth")

    def ack_watch(self, edges: Sequence[str] | None = None) -> AckWatch:
        """A watch on these agents' acknowledgements (AckWatch; default: every agent), to use as a
        context manager."""
        chosen = self.site.edges if edges is None else edges
        return AckWatch({edge: self.site.addresses.get(edge, edge) for edge in chosen})

    def wait_recovered(self, since: float) -> float:
        """When the whole site flowed again after `since`: the latest of each query's first
        commit and each agent's drain. Raises TimeoutError (a stall) past the bound."""
        deadline = since + self.bound
        times: dict[str, float] = {}
        while time.time() < deadline:
            for app in set(self.site.apps) - set(times):
                with contextlib.suppress(Exception):
                    if (at := self.committed_since(app, since)) is not None:
                        times[app] = at
            for edge in set(self.site.edges) - set(times):
                with contextlib.suppress(Exception):
                    if self.spool_depth(edge) <= DRAINED_DEPTH:
                        times[edge] = max(time.time(), since)
            if len(times) == len(self.site.apps) + len(self.site.edges):
                self.last_to_flow = max(times, key=lambda part: times[part])
                return max(times.values())
            time.sleep(1)
        stalled = sorted(set(self.site.apps + self.site.edges) - set(times))
        raise TimeoutError(
            f"stalled: {', '.join(stalled)} not flowing {self.bound:.0f}s after the fault's end"
        )


def _seconds(by_name: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.0f}s" for name, value in sorted(by_name.items()))


def summary(recoveries: list[Recovery]) -> str:
    seconds = [r.seconds for r in recoveries]
    return (
        f"{len(seconds)} faults; recovery p50 {statistics.median(seconds):.0f}s, "
        f"max {max(seconds):.0f}s ({max(recoveries, key=lambda r: r.seconds).fault})"
    )


def past_bounds(recoveries: list[Recovery]) -> list[str]:
    """Each recovery longer than its kind's bound (RECOVERY_BOUNDS), named."""
    return [
        f"{r.fault}: {r.seconds:.0f}s, bound {RECOVERY_BOUNDS[r.fault.kind]:.0f}s"
        for r in recoveries
        if r.seconds > RECOVERY_BOUNDS[r.fault.kind]
    ]


def agents_delivering(fault: Fault, edges: Sequence[str]) -> tuple[str, ...]:
    """The agents that must keep delivering through `fault`, each send acknowledged within
    AGENT_WAIT_S of the one before. None while two brokers or more are down: a partition with one
    live replica refuses writes (min ISR 2), by design. Not the agent a fault cuts off or kills:
    its spool holds its readings, and the fault's recovery waits for it to drain. Every other
    agent through every other fault: one broker killed, hung, full or lost leaves each partition
    two live replicas of three, and Spark's side is not on the readings' path."""
    if fault.kind == COMMIT_HELD or (fault.kind == BROKERS_KILLED and len(fault.targets) > 1):
        return ()
    if fault.kind in (DEVICE_CUT, AGENT_KILLED):
        return tuple(edge for edge in edges if edge not in fault.targets)
    return tuple(edges)


def agents_past_bound(recoveries: list[Recovery]) -> list[str]:
    """Each fault the agents deliver through during which one waited longer than AGENT_WAIT_S for
    an acknowledgement, named with the agents' waits."""
    return [
        f"{r.fault}: {_seconds(r.agent_waits)}, bound {AGENT_WAIT_S:.0f}s"
        for r in recoveries
        if max(r.agent_waits.values(), default=0.0) > AGENT_WAIT_S
    ]


def scoreboard(recoveries: list[Recovery]) -> str:
    """One line per kind of fault: how many, recovery p50 and max, and the kind's bound."""
    by_kind: dict[str, list[float]] = {}
    for r in recoveries:
        by_kind.setdefault(r.fault.kind, []).append(r.seconds)
    rows = [f"{'kind':<28} {'faults':>6} {'p50':>6} {'max':>6} {'bound':>6}"]
    for kind in sorted(by_kind, key=KINDS.index):
        seconds = by_kind[kind]
        rows.append(
            f"{kind:<28} {len(seconds):>6} {statistics.median(seconds):>5.0f}s {max(seconds):>5.0f}s "
            f"{RECOVERY_BOUNDS[kind]:>5.0f}s{'  PAST' if max(seconds) > RECOVERY_BOUNDS[kind] else ''}"
        )
    waits = [wait for r in recoveries for wait in r.agent_waits.values()]
    if waits:
        rows.append(
            f"{'an agent waiting for an ack':<28} {len(waits):>6} {statistics.median(waits):>5.0f}s "
            f"{max(waits):>5.0f}s {AGENT_WAIT_S:>5.0f}s{'  PAST' if max(waits) > AGENT_WAIT_S else ''}"
        )
    return "\n".join(rows)


def chosen_kinds(text: str, allowed: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The kinds `text` names (comma-separated), and those of ALWAYS among them, which each run
    draws at least once; a kind not in `allowed` is a ValueError that names the allowed ones."""
    kinds = tuple(text.split(","))
    if unknown := set(kinds) - set(allowed):
        raise ValueError(f"unknown kinds {sorted(unknown)}; the kinds here are {', '.join(allowed)}")
    return kinds, tuple(kind for kind in ALWAYS if kind in kinds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pikit_testkit.nemesis", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--inventory", type=Path, default=REPO / "inventory/lab")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 32))
    parser.add_argument("--faults", type=int, default=6)
    parser.add_argument("--longest", type=float, default=180.0, help="the longest broker outage, seconds")
    parser.add_argument("--bound", type=float, default=300.0, help="a recovery longer than this is a stall")
    parser.add_argument("--apps", default="sensor_aggregates,anomaly_alerts")
    # A Pi lost for good is re-flashed and provisioned by the e2e suite (tests/e2e), not here.
    here = tuple(kind for kind in KINDS if kind != PI_LOST)
    parser.add_argument("--kinds", default=",".join(here), help="the kinds to draw from, comma-separated")
    args = parser.parse_args(argv)
    try:
        kinds, always = chosen_kinds(args.kinds, here)
    except ValueError as error:
        parser.error(str(error))
    site = SiteNodes.from_inventory(args.inventory, tuple(args.apps.split(",")))
    faults = schedule(args.seed, args.faults, site, longest=args.longest, kinds=kinds, always=always)
    print(f"[nemesis] seed {args.seed}: {len(faults)} faults", flush=True)
    for fault in faults:
        print(f"  {fault} (after {fault.quiet:.0f}s calm)", flush=True)
    recoveries = Nemesis(site, args.bound, log=lambda line: print(line, flush=True)).run(faults)
    print(f"[nemesis] seed {args.seed}: {summary(recoveries)}")
    print(scoreboard(recoveries))
    past = past_bounds(recoveries) + agents_past_bound(recoveries)
    if past:
        sys.exit(f"[nemesis] recoveries past their kind's bound: {past}")


if __name__ == "__main__":
    main()
