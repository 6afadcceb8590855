"""A streaming app's restart: from its driver killed -9 until its query commits again, per set of
JVM options on the app's driver and executors, side by side in one run.

Every restart pays this (a kill, the watchdog, an upgrade, a power cut), and the fault suite's
recovery bound measures it: the short nemesis' slowest recovery is the driver killed in its commit.

Needs the demo's lab (`make demo`). The contenders take turns, their order reversed every other
round, so that the lab's noise falls on each. One turn:
- the contender's options (`spark.driver.extraJavaOptions` and `spark.executor.extraJavaOptions`)
  written to the drivers' Pi's spark-defaults.conf, in a block of their own after the role's lines (the
  last of a key wins), which the run removes at its end; every contender names its JIT level, as the
  role's `spark_app_java_options` sets one; a systemd restart of the app, so that the kill below
  meets a driver that has run a while;
- once the app commits again and `--settle` seconds have passed, its driver killed -9 by its unit's
  main PID; systemd starts it again (Restart=always);
- from the app's journal and its checkpoint on the shared volume: kill -> query started, kill ->
  the first commit, the first batch's wall time, and the next `--steady` batches with input
  (Spark's `triggerExecution`, which the app logs per batch), in two halves: while the JIT still
  compiles, and after.

    make demo && .venv/bin/python -m bench.restart_cost [--rounds 3] [--app sensor_aggregates]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field

from bench import lab as lab_
from bench.batch_cost import APPS
from bench.rounds import named

BEGIN, END = "# bench.restart_cost: begin", "# bench.restart_cost: end"
C2, C1 = "-XX:TieredStopAtLevel=4", "-XX:TieredStopAtLevel=1"
SERIAL = "-XX:+UseSerialGC"
# name -> (the driver's options, the executors' options)
CONTENDERS = {
    "C2, G1 (the JVM's default)": (C2, C2),
    "C1 only, G1": (C1, C1),
    "C1 only, serial collector (the kit's default)": (f"{C1} {SERIAL}", f"{C1} {SERIAL}"),
}
# Past this a turn fails: the fault suite's own stall bound.
BOUND_S = 300
_BATCH = re.compile(r"query (\S+) batch (\d+): (\d+) rows in, [\d.]+ rows/s, (\d+) ms")
_STARTED = re.compile(r"query (\S+) started")


def sh(node: str, script: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["podman", "exec", "-i", node, "sh", "-c", script], input=stdin, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"{node}: {script[:200]}: {done.stderr[-2000:]}")
    return done.stdout


def with_options(conf: str, options: tuple[str, str] | None) -> str:
    """spark-defaults.conf without this bench's block, then with one that sets the driver's and the
    executors' `options` (None: no block)."""
    lines, inside = [], False
    for line in conf.splitlines():
        if line == BEGIN:
            inside = True
        elif line == END:
            inside = False
        elif not inside:
            lines.append(line)
    if options is not None:
        driver, executor = options
        lines += [
            BEGIN,
            f"spark.driver.extraJavaOptions    {driver}",
            f"spark.executor.extraJavaOptions  {executor}",
            END,
        ]
    return "\n".join(lines) + "\n"


@dataclass
class Turn:
    contender: str
    started_s: float  # kill -> the query started
    committed_s: float  # kill -> its first commit
    first_batch_s: float  # that batch's wall time
    steady: list[float] = field(default_factory=list)  # the next batches with input


class Restarts:
    def __init__(self, app: str, settle: float, steady: int) -> None:
        self.lab = lab_.find()
        # The Pi where the app is active: its spark-defaults.conf and the app's unit (a driver that
        # systemd restarts there takes its place back: pikit_spark/leadership.py).
        self.master = self.lab.driver_of(app)
        self.unit = APPS[app][0]
        self.checkpoint = self.lab.scratch_of(self.master, app)
        self.settle, self.steady = settle, steady

    def commits_since(self, moment: float) -> list[float]:
        return sorted(
            p.stat().st_mtime
            for p in self.checkpoint.glob("**/commits/*")
            if not p.name.startswith(".") and p.stat().st_mtime > moment
        )

    def wait_commit(self, since: float) -> float:
        deadline = since + BOUND_S
        while time.time() < deadline:
            if found := self.commits_since(since):
                return found[0]
            time.sleep(1)
        raise SystemExit(f"{self.unit}: no commit within {BOUND_S} s of {since:.0f}: a stall")

    def set_options(self, options: tuple[str, str] | None) -> None:
        conf = sh(self.master, f"cat {lab_.SPARK_DEFAULTS}")
        sh(self.master, f"cat > {lab_.SPARK_DEFAULTS}", with_options(conf, options))

    def journal(self, since: float) -> list[tuple[float, str]]:
        out = sh(self.master, f"journalctl -u {self.unit} --since @{since:.0f} -o short-unix --no-pager -q")
        found = []
        for line in out.splitlines():
            stamp, _, text = line.partition(" ")
            try:
                found.append((float(stamp), text))
            except ValueError:
                continue
        return found

    def turn(self, contender: str) -> Turn:
        self.set_options(CONTENDERS[contender])
        sh(self.master, f"systemctl restart {self.unit}")
        self.wait_commit(time.time())
        time.sleep(self.settle)
        pid = sh(self.master, f"systemctl show -p MainPID --value {self.unit}").strip()
        killed = time.time()
        sh(self.master, f"kill -9 {pid}")
        committed = self.wait_commit(killed)
        deadline = time.time() + BOUND_S
        while True:
            # One read of the journal per poll: the batches (logged at, input rows, wall s), and
            # the query's start.
            entries = [(at, text) for at, text in self.journal(killed) if at >= killed]
            batches = [
                (at, int(m[3]), int(m[4]) / 1000) for at, text in entries if (m := _BATCH.search(text))
            ]
            with_input = [b for b in batches[1:] if b[1]]
            if batches and len(with_input) >= self.steady:
                break
            if time.time() > deadline:
                raise SystemExit(
                    f"{self.unit}: fewer than {self.steady + 1} batches logged after its restart"
                )
            time.sleep(5)
        started = next(at for at, text in entries if _STARTED.search(text))
        return Turn(
            contender,
            started - killed,
            committed - killed,
            batches[0][2],
            [wall for _, _, wall in with_input[: self.steady]],
        )


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--app", choices=sorted(APPS), default="sensor_aggregates")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=60, help="seconds the app runs before the kill")
    parser.add_argument("--steady", type=int, default=6, help="batches with input measured after the first")
    parser.add_argument(
        "--with",
        dest="extra",
        action="append",
        type=named,
        default=[],
        metavar="NAME=DRIVER[|EXECUTORS]",
        help="one more contender: its driver's JVM options and its executors' (the driver's when not given)",
    )
    args = parser.parse_args()
    for name, options in args.extra:
        driver, _, executors = options.partition("|")
        CONTENDERS[name] = (driver, executors or driver)
    restarts = Restarts(args.app, args.settle, args.steady)
    print(f"{args.app} on {restarts.master}: {args.rounds} rounds of {list(CONTENDERS)}", flush=True)
    turns: list[Turn] = []
    try:
        for number in range(args.rounds):
            order = list(CONTENDERS) if number % 2 == 0 else list(reversed(CONTENDERS))
            for contender in order:
                turn = restarts.turn(contender)
                turns.append(turn)
                print(
                    f"  round {number + 1} {contender}: started {turn.started_s:.0f} s, first commit "
                    f"{turn.committed_s:.0f} s after the kill, first batch {turn.first_batch_s:.1f} s, then "
                    f"{', '.join(f'{s:.1f}' for s in turn.steady)} s",
                    flush=True,
                )
    finally:
        restarts.set_options(None)
        sh(restarts.master, f"systemctl restart {restarts.unit}")
    print(
        "\n| contender | kill -> query started, s | kill -> first commit, s | first batch, s "
        "| next batches, first half, s | second half, s |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for contender in CONTENDERS:
        mine = [t for t in turns if t.contender == contender]
        # The batches right after the first, while the JIT still compiles, and those after them.
        early = [s for t in mine for s in t.steady[: len(t.steady) // 2]]
        later = [s for t in mine for s in t.steady[len(t.steady) // 2 :]]
        print(
            f"| {contender} | {spread([t.started_s for t in mine])} | "
            f"{spread([t.committed_s for t in mine])} | {spread([t.first_batch_s for t in mine])} | "
            f"{spread(early)} | {spread(later)} |"
        )
    print("median (min-max) over the rounds; the last columns over every batch of every round")


if __name__ == "__main__":
    main()
