"""The make targets that chain several phases (`make test`, `make demo`).

Each phase prints its start and duration; a summary table closes the run. A
failing phase stops the pipeline, names itself, and (for demo phases that log
to a file) shows the log tail.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pikit import REPO, progress
from pikit.phases import say
from pikit_dev import cpu_share
from pikit_dev.lab_image import lab_home

VENV_BIN = REPO / ".venv/bin"


# Lines worth repeating under the summary when a phase fails: CI logs are often read from
# the end, and a molecule scenario prints thousands of lines after its first error.
_FAILURE_LINE = re.compile(
    r"(FAILED|fatal:|ERROR|Error:|Error |error:|AssertionError|assert |timed out|Timeout|Traceback|"
    r"missing window|emitted \d+ times|unexpected window|msg)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
Step = Callable[[list[str]], int]


# A lane that runs beside another holds its output (`_held.out`) until it ends, so that two
# phases' lines never interleave; None (the default) passes output straight through.
_held = threading.local()
_print_lock = threading.Lock()


class HeldOutput:
    """A held lane's output, written to a file as it comes, so that a lane held for two hours can
    be followed (and a failure read) meanwhile; the file is printed in one piece when it ends."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("wb")

    def add(self, raw: bytes) -> None:
        self._file.write(raw)
        self._file.flush()

    def close(self) -> bytes:
        """Everything the lane wrote."""
        self._file.close()
        return self.path.read_bytes()


def _stream(argv: list[str], cwd: Path, tail: list[str], extra_env: dict[str, str] | None = None) -> int:
    """Run argv, passing its output through and keeping the last lines in `tail`.

    On a terminal the output is not piped (the demo's live table and colours need a TTY);
    the person watching has the failure in front of them anyway.
    """
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", **(extra_env or {})}
    held: HeldOutput | None = getattr(_held, "out", None)
    cgroup: str | None = getattr(_held, "cgroup", None)
    if cgroup:
        argv = cpu_share.in_background(argv, cgroup)
    if sys.stdout.isatty() and held is None:
        return subprocess.run(argv, cwd=cwd, env=env, check=False).returncode
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    kept: collections.deque[str] = collections.deque(maxlen=4000)
    for raw in proc.stdout:
        if held is None:
            sys.stdout.buffer.write(raw)
            sys.stdout.flush()
        else:
            held.add(raw)
        kept.append(_ANSI.sub("", raw.decode(errors="replace")).rstrip())
    tail.extend(kept)
    return proc.wait()


def _say(message: str, now: bool = False) -> None:
    """A line of the pipeline's own, or held with its lane's output while the lane runs; `now`
    prints it at once as well (a phase's end: a lane held for two hours still shows where it is)."""
    held: HeldOutput | None = getattr(_held, "out", None)
    if held is None or now:
        with _print_lock:
            say(message)
    if held is not None:
        held.add(f"{message}\n".encode())


def _cmd(*argv: str | Path, env: dict[str, str] | None = None) -> Step:
    return lambda tail: _stream([str(a) for a in argv], REPO, tail, env)


def failure_digest(lines: list[str], limit: int = 40) -> list[str]:
    """The lines of a failed phase's output that say why, de-duplicated, last ones kept."""
    picked: list[str] = []
    for line in lines:
        text = line.strip(" │|")
        if _FAILURE_LINE.search(text) and "FAILED - RETRYING" not in text and text not in picked:
            picked.append(text[:300])
    return picked[-limit:]


# Scenarios whose ground `make test` already covers on the end-to-end lab; they run in
# `make test-ops` so that `make test` stays within CI's hour on 2 cores. One after another in this
# order, the emulated devices, the slowest to converge, last; but WAITING runs in a lane of its own.
OPS_SCENARIOS = {
    ("connect", "mirror"): "a site mirrored to a core with its own CA, by the kit's playbooks on two "
    "inventories: the uplink cut for 10 minutes, the worker killed -9, the core's copy compared record "
    "by record",
    ("kafka", "default"): "combined mode's life on one cluster: converged at the previous release, "
    "upgraded and finalized under a producer; the role's verifier, its site topics and its converges "
    "again (a node given another id, a node that lost its storage); then a broker added, filled and "
    "taken out again under a producer (kafka-rebalance.yml)",
    ("kafka", "dedicated"): "dedicated controllers, and the broker faults: a broker killed -9 under a "
    "producer, a node given another id, a node that lost its storage, a small data disk filled; and "
    "a config change restarting the nodes one at a time, controllers first, under producers "
    "(PIKIT_TEST_OPS)",
    ("kafka", "quorum"): "a static quorum made dynamic, then 3 to 5 voters and back to 3, under a producer",
    ("spark", "default"): "Spark from the binary tarball; the end-to-end lab runs the wheel "
    "that the demo and site.yml use, and kills its driver",
    (
        "edge_agent",
        "emulated",
    ): "the agent and the base roles on emulated arm64 and armhf devices (qemu-user)",
}
# The scenario that mostly waits (its uplink cut for 10 minutes, the copy's return).
WAITING = ("connect", "mirror")


def molecule_scenarios() -> list[tuple[str, str]]:
    """(role, scenario) for every molecule scenario in the kit."""
    found = []
    for scenario in sorted(REPO.glob("roles/*/molecule/*/molecule.yml")):
        found.append((scenario.parents[2].name, scenario.parent.name))
    return found


def _e2e(*pytest_args: str, env: dict[str, str] | None = None) -> Step:
    """The end-to-end suite (tests/e2e) on its own lab, its ten slowest tests named."""
    return _cmd(
        VENV_BIN / "python", "-m", "pytest", "-q", "-s", DURATIONS, *pytest_args, "tests/e2e", env=env
    )


def _progress(name: str, *argv: str) -> Step:
    """An ansible-playbook run as progress on a terminal (pikit/progress.py), its whole output in
    the lab's logs; off a terminal, as raw as any other phase."""

    def step(tail: list[str]) -> int:
        if not sys.stdout.isatty():
            return _stream(list(argv), REPO, tail)
        log = lab_home() / "logs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
        return progress.run(list(argv), log, REPO, env)

    return step


# Touched by the end-to-end suite once the scenarios it runs alone (marked `alone`) have ended
# (tests/e2e/harness.py, done_alone): in make test its converge and the drivers' Pi lost, taken over
# and replaced; in make test-ops its converge and the standby's and the master's Pis lost.
E2E_ALONE_DONE = lab_home() / "e2e-alone-done"
ALONE_WAIT_S = 1800.0


def _e2e_alone_env() -> dict[str, str]:
    """The end-to-end suite's environment when another lane waits for its `alone` scenarios: the
    file it touches once they ran, removed first so that no earlier run's counts."""
    E2E_ALONE_DONE.unlink(missing_ok=True)
    return {"PIKIT_E2E_ALONE_DONE": str(E2E_ALONE_DONE)}


def _after_e2e_alone(tail: list[str]) -> int:
    """Wait until the end-to-end suite has run what it runs alone (or ended), at most ALONE_WAIT_S."""
    deadline = time.monotonic() + ALONE_WAIT_S
    while not E2E_ALONE_DONE.exists():
        if time.monotonic() > deadline:
            tail.append(f"the end-to-end converge, takeover and replacement not done in {ALONE_WAIT_S:.0f}s")
            return 1
        time.sleep(2)
    return 0


def _molecule(role: str, scenario: str, env: dict[str, str] | None = None) -> Step:
    return lambda tail: _stream(["molecule", "test", "-s", scenario], REPO / "roles" / role, tail, env)


Phase = tuple[str, Step]


@dataclass
class Beside:
    """Lanes of phases that run at the same time, each lane's phases one after another. Only
    phases that share nothing go here: lint reads the tree, while the artifact cache, the unit
    and the integration tests write only their own files and ports. The first lane's output
    streams; each other lane's is held and shown in one piece when it ends."""

    lanes: Sequence[Sequence[Phase]]


@dataclass
class Background:
    """Lanes of phases that no bound waits on: they start where the pipeline reaches them and run
    beside every later phase, in the background cgroup (pikit_dev.cpu_share), on the CPU that the
    timed phases leave idle; in the idle cgroup where they must never take CPU from a timed phase,
    however much they would take. The pipeline ends when they have ended too."""

    lanes: Sequence[Sequence[Phase]]
    cgroup: str = cpu_share.BACKGROUND
    # Phases that share nothing (each molecule scenario makes its own lab) all run, whichever
    # failed before: a lane of two hours that stops at its first failure hides the rest.
    keep_going: bool = False


Item = Phase | Beside | Background


def flat(phases: Sequence[Item]) -> list[Phase]:
    """Every phase of a pipeline, those run beside others included."""
    found: list[Phase] = []
    for item in phases:
        lanes = item.lanes if isinstance(item, Beside | Background) else [[item]]
        found += [phase for lane in lanes for phase in lane]
    return found


def lint_phases() -> list[tuple[str, Step]]:
    return [
        ("yamllint", _cmd("yamllint", "--strict", ".")),
        ("ansible-lint", _cmd("ansible-lint", "--profile", "production", "--offline")),
        ("ruff", _cmd("ruff", "check", ".")),
        ("ruff format", _cmd("ruff", "format", "--check", ".")),
        ("mypy", _cmd("mypy")),
        ("role README tables", _cmd(VENV_BIN / "python", "-m", "pikit_dev.roledocs", "--check")),
    ]


# Each pytest phase names its ten slowest tests, so that the next slow one shows itself.
DURATIONS = "--durations=10"
# Every bench entry at a tiny size (an integration test, in its own lane in make test).
BENCH_ENTRIES = "tests/integration/test_bench_entries.py"
# Integration tests run after lint in its lane, each lane of the first set then near the unit
# tests' length: at 2a889f3 the unit tests took 502 s, lint 190 s and the integration tests 546 s
# after the cache's 53 s, with the machine 22 % idle (271 core-seconds) over the set.
INTEGRATION_AFTER_LINT = ("tests/integration/test_transactional_sink.py", "tests/integration/test_mirror.py")
# The unit tests: tests/unit, and each sensor's own beside it (edge_agent/sensors/<type>/).
UNIT_TESTS = ("tests/unit", "edge_agent/edge_agent/sensors")


def test_phases() -> list[Item]:
    """Two sets of lanes. First: the unit tests; the artifact cache, then the integration tests
    that start Kafka from it; the lab's image, lint, then the rest of the integration tests. Then
    the end-to-end suite beside the other lane: once the suite's scenarios that run alone have run,
    the molecule scenarios (one, which runs its own lab on its own subnet and names), then the
    bench entries, beside the suite's faults, whose waits leave a core idle. The layouts tried,
    and what each run took: docs/testing.md, "How long make test takes"."""
    python = VENV_BIN / "python"
    # The day-2 procedures' unit tests (several minutes of ansible-playbook each) run in test-ops.
    unit = [
        ("unit tests", _cmd(python, "-m", "pytest", "-q", DURATIONS, "-n", "2", "-m", "not ops", *UNIT_TESTS))
    ]
    fill_cache = _cmd(python, "-m", "pikit.artifacts")
    ignored = [arg for path in (BENCH_ENTRIES, *INTEGRATION_AFTER_LINT) for arg in ("--ignore", path)]
    integration = [
        ("artifact cache", fill_cache),
        ("integration tests", _cmd(python, "-m", "pytest", "-q", DURATIONS, *ignored, "tests/integration")),
    ]
    # A fresh machine builds the image (debootstrap, mostly waiting on the network) once, here,
    # so that no two labs of the second set race to build it. Then lint, then a share of the
    # integration tests, once the other lane's cache is full (its lock holds this lane until then).
    image_then_lint = [
        ("lab image", _cmd(python, "-m", "pikit_dev.lab", "image")),
        *lint_phases(),
        ("artifact cache, once full", fill_cache),
        (
            "integration tests: the sink's transactions, the mirror",
            _cmd(python, "-m", "pytest", "-q", DURATIONS, *INTEGRATION_AFTER_LINT),
        ),
    ]
    # After the end-to-end converge and the drivers' Pi lost and replaced: beside the converge,
    # molecule edge_agent/default and the converge each took four times as long as alone (890 s
    # against 191 s); beside molecule's lane, the standby's takeover took 138 s (50-70 s alone).
    # Lint and the bench entries ran in the background from the start at 2516e2e, and CI took 80 s
    # longer than the run before: they reached into the scenarios that run alone.
    after_alone: list[Phase] = [
        ("wait for the end-to-end converge, takeover and replacement", _after_e2e_alone),
        *[
            (f"molecule {r}/{s}", _molecule(r, s))
            for r, s in molecule_scenarios()
            if (r, s) not in OPS_SCENARIOS
        ],
        ("bench entries", _cmd(python, "-m", "pytest", "-q", DURATIONS, BENCH_ENTRIES)),
    ]
    e2e_tests = _e2e("-m", "not ops and not migration", env=_e2e_alone_env())
    return [
        Beside([unit, integration, image_then_lint]),
        Beside([[("end-to-end (site.yml on the lab)", e2e_tests)], after_alone]),
    ]


def ops_phases() -> list[Item]:
    """What `make test` leaves out for time, and only that, in three lanes that share no lab (each
    molecule scenario and the end-to-end suite run their own, on their own subnets and names). The
    first lane is the end-to-end suite's `ops` scenarios (the Pis lost for good that make test does
    not lose, the long nemesis, every certificate renewed, the CA rotated, ...) between the converge
    and the closing checks of the whole output (`frame`); then a lab on Bookworm, the Raspberry Pi
    OS release before the lab's default (Trixie): its converge, each broker re-flashed with Trixie
    in turn, the whole output. Both name their lab pikit-e2e, so they follow each other. The other
    two lanes run from the start in the idle cgroup, their nodes too (pikit_dev.cpu_share), on the
    CPU the first lane leaves unused: the mirror, which mostly waits; and the day-2 procedures'
    unit tests, then the other molecule scenarios. make test's own end-to-end scenarios are not
    run again."""
    for (role, scenario), why in OPS_SCENARIOS.items():
        say(f"    {role}/{scenario}: {why}")
    # kafka/dedicated alone runs the verifier's ops test (a config-change rolling restart): on its
    # five nodes the controllers restart first; kafka/default's combined nodes would only repeat it.
    idle = {"PIKIT_LAB_IDLE": "1"}
    with_ops = {**idle, "PIKIT_TEST_OPS": "1"}
    ops_tests = {("kafka", "dedicated"): with_ops}
    python = VENV_BIN / "python"
    end_to_end: list[Phase] = [
        (
            "end-to-end: the Pis lost, then the ops scenarios",
            # Not make test's drivers' Pi lost: the standby's Pi lost needs only both apps on one
            # Pi, as the converge leaves them.
            _e2e("-m", "(ops or frame) and not migration"),
        ),
        (
            "end-to-end on Bookworm: the converge, each broker re-flashed with Trixie, the whole output",
            _e2e("-m", "frame or migration", env={"PIKIT_E2E_SUITE": "bookworm"}),
        ),
    ]
    molecule = {
        (r, s): (f"molecule {r}/{s}", _molecule(r, s, ops_tests.get((r, s), idle))) for r, s in OPS_SCENARIOS
    }
    # WAITING runs in a lane of its own, beside the scenarios that take CPU: one after another, its
    # 27 minutes would add to theirs (2026-12-06: it passed in 27 minutes beside lane 1 and the others).
    waiting = molecule.pop(WAITING)
    busy = list(molecule.values())
    scenarios: list[Phase] = [
        (
            "unit tests of the day-2 procedures (the CA rotation, a mirror's identity exchange)",
            _cmd(python, "-m", "pytest", "-q", DURATIONS, "-m", "ops", *UNIT_TESTS),
        ),
        *busy,
    ]
    # A fresh machine builds the image once, before the lanes race to. Every earlier layout gave
    # the scenarios a weight (their nodes a quarter of the end-to-end lab's, their controller side
    # half the pipeline's, or the same as both) and waited for the end-to-end suite's Pis lost:
    # beside molecule kafka/default, the long nemesis's recoveries still went past their 60 s
    # bounds (74 s, 66 s, 68 s at 28ff8ba; driver cuts 89-117 s and commit-killed faults 72-91 s at
    # ea0d82a, against 9-16 s and 24-25 s with the machine to itself). Idle, they take none of its CPU.
    return [
        ("lab image", _cmd(python, "-m", "pikit_dev.lab", "image")),
        Background([[waiting], scenarios], cgroup=cpu_share.IDLE_CONTROLLER, keep_going=True),
        *end_to_end,
    ]


def demo_phases() -> list[tuple[str, Step]]:
    python = VENV_BIN / "python"
    return [
        ("artifact cache", _cmd(python, "-m", "pikit.artifacts")),
        ("lab up", _cmd(python, "-m", "pikit_dev.lab", "up")),
        ("site.yml", _progress("site", "ansible-playbook", "playbooks/site.yml")),
        ("the apps' first micro-batches", _cmd(python, "-m", "pikit_dev.demo", "wait")),
        ("show", _cmd(python, "-m", "pikit_dev.demo")),
    ]


PIPELINES: dict[str, Callable[[], Sequence[Item]]] = {
    "test": test_phases,
    "test-ops": ops_phases,
    "demo": demo_phases,
    "lint": lint_phases,
}


@dataclass
class Result:
    title: str
    elapsed: float
    rc: int
    tail: list[str]
    lane: int = 0  # 0: on its own; n: in lane n of phases run beside each other
    wall: bool = False  # the wall time of lanes run together, not a phase of its own


def _run_lane(
    name: str, phases: Sequence[Phase], lane: int, results: list[Result], keep_going: bool = False
) -> None:
    """The phases one after another, until one fails (each of them, if they share nothing)."""
    for title, step in phases:
        _say(f"==> [{name}] {title}")
        t0 = time.monotonic()
        tail: list[str] = []
        rc = step(tail)
        elapsed = time.monotonic() - t0
        results.append(Result(title, elapsed, rc, tail, lane))
        verdict = "ok" if rc == 0 else f"FAILED (exit {rc})"
        _say(f"<== [{name}] {title}: {verdict} in {elapsed:.1f}s", now=True)
        if rc != 0 and not keep_going:
            return


def _start_lanes(
    name: str, lanes: Sequence[Sequence[Phase]], first_lane: int, cgroup: str | None, keep_going: bool = False
) -> tuple[list[threading.Thread], list[list[Result]]]:
    """A thread per lane, started. The first lane of a Beside streams its output; every other
    lane's, and every background lane's, is held and shown in one piece when the lane ends."""
    titles = [" > ".join(title for title, _ in lane) for lane in lanes]
    kind = f"in the background ({cgroup})" if cgroup else "at the same time"
    say(f"==> [{name}] {kind}: {' | '.join(titles)}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    held = {
        index: HeldOutput(lab_home() / "logs" / f"{name}-lane{first_lane + index}-{stamp}.log")
        for index in range(len(lanes))
        if cgroup is not None or index > 0
    }
    for index, out in held.items():
        say(f"    lane {first_lane + index}'s output, as it runs: {out.path}")

    def lane_main(index: int, phases: Sequence[Phase], out: list[Result]) -> None:
        _held.cgroup = cgroup
        _held.out = held.get(index)
        try:
            _run_lane(name, phases, first_lane + index, out, keep_going)
        finally:
            if index in held:
                written = held[index].close()
                with _print_lock:
                    say(f"--- [{name}] lane {first_lane + index} ({titles[index]}), held while it ran:")
                    sys.stdout.buffer.write(written)
                    sys.stdout.flush()

    outs: list[list[Result]] = [[] for _ in lanes]
    threads = [threading.Thread(target=lane_main, args=(i, lane, outs[i])) for i, lane in enumerate(lanes)]
    for thread in threads:
        thread.start()
    return threads, outs


def _join_lanes(threads: list[threading.Thread], outs: list[list[Result]], results: list[Result]) -> None:
    for thread in threads:
        thread.join()
    for out in outs:
        results.extend(out)


def _run_beside(name: str, beside: Beside, results: list[Result]) -> float:
    """Every lane at once; the wall time they took together."""
    t0 = time.monotonic()
    _join_lanes(*_start_lanes(name, beside.lanes, 1, cgroup=None), results)
    return time.monotonic() - t0


def run_pipeline(name: str) -> int:
    results: list[Result] = []
    started = time.monotonic()
    # Lanes in the background, numbered after every lane run beside another.
    background: list[tuple[list[threading.Thread], list[list[Result]]]] = []
    items = PIPELINES[name]()
    next_lane = 1 + max((len(item.lanes) for item in items if isinstance(item, Beside)), default=0)
    for item in items:
        if isinstance(item, Background):
            background.append(_start_lanes(name, item.lanes, next_lane, item.cgroup, item.keep_going))
            next_lane += len(item.lanes)
        elif isinstance(item, Beside):
            wall = _run_beside(name, item, results)
            say(f"<== [{name}] lanes done in {wall:.1f}s")
            results.append(Result("(the lanes above, wall time)", wall, 0, [], 0, wall=True))
        else:
            _run_lane(name, [item], 0, results)
        if any(r.rc for r in results):
            break
    if background:
        say(f"==> [{name}] waiting for the lanes in the background")
        for threads, outs in background:
            _join_lanes(threads, outs, results)
    say(f"\n{name}: phase times")
    for r in results:
        title = f"{'  ' if r.lane else ''}{r.title}{f' [lane {r.lane}]' if r.lane else ''}"
        say(f"  {title:<44} {r.elapsed:7.1f}s  {'ok' if r.rc == 0 else 'FAILED'}")
    say(f"  {'total':<44} {time.monotonic() - started:7.1f}s")
    failed = [r for r in results if r.rc]
    phases = [r for r in results if not r.wall]
    say(f"phases: {len(phases) - len(failed)} passed, {len(failed)} failed")
    for r in failed:
        say(f"\nwhy {r.title} failed (the lines of its output that say so):")
        for line in failure_digest(r.tail) or r.tail[-20:]:
            say(f"  | {line}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pipeline", choices=sorted(PIPELINES))
    args = parser.parse_args(argv)
    cpu_share.weigh_as_one_machine()
    sys.exit(run_pipeline(args.pipeline))


if __name__ == "__main__":
    main()
