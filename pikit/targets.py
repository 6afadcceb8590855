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
import time
from collections.abc import Callable
from pathlib import Path

from pikit import REPO
from pikit.phases import say

VENV_BIN = REPO / ".venv/bin"


# Lines worth repeating under the summary when a phase fails: CI logs are often read from
# the end, and a molecule scenario prints thousands of lines after its first error.
_FAILURE_LINE = re.compile(
    r"(FAILED|fatal:|ERROR|Error:|Error |error:|AssertionError|assert |timed out|Timeout|Traceback|"
    r"missing window|emitted \d+ times|unexpected window|msg)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
Step = Callable[[list[str]], int]


def _stream(argv: list[str], cwd: Path, tail: list[str], extra_env: dict[str, str] | None = None) -> int:
    """Run argv, passing its output through and keeping the last lines in `tail`.

    On a terminal the output is not piped (the demo's live table and colours need a TTY);
    the person watching has the failure in front of them anyway.
    """
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", **(extra_env or {})}
    if sys.stdout.isatty():
        return subprocess.run(argv, cwd=cwd, env=env, check=False).returncode
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    kept: collections.deque[str] = collections.deque(maxlen=4000)
    for raw in proc.stdout:
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        kept.append(_ANSI.sub("", raw.decode(errors="replace")).rstrip())
    tail.extend(kept)
    return proc.wait()


def _cmd(*argv: str | Path) -> Step:
    return lambda tail: _stream([str(a) for a in argv], REPO, tail)


def failure_digest(lines: list[str], limit: int = 40) -> list[str]:
    """The lines of a failed phase's output that say why, de-duplicated, last ones kept."""
    picked: list[str] = []
    for line in lines:
        text = line.strip(" │|")
        if _FAILURE_LINE.search(text) and "FAILED - RETRYING" not in text and text not in picked:
            picked.append(text[:300])
    return picked[-limit:]


# Scenarios whose ground `make test` already covers on the end-to-end lab; they run in
# `make test-ops` so that `make test` stays within CI's hour on 2 cores.
OPS_SCENARIOS = {
    ("kafka", "default"): "combined mode: the end-to-end lab converges it, kills its brokers, "
    "and checks idempotence; here it also rotates the CA under producers (KAFKA_TEST_OPS)",
    ("spark", "default"): "Spark from the binary tarball; the end-to-end lab runs the wheel "
    "that the demo and site.yml use, and kills its driver",
    ("kafka", "upgrade"): "a Kafka upgrade from the previous release and its finalize under a producer; "
    "make test's scenarios run the kit's release only",
    ("kafka", "scale"): "a broker added, filled and taken out again under a producer (kafka-rebalance.yml)",
    ("kafka", "quorum"): "a static quorum made dynamic, then 3 to 5 voters and back to 3, under a producer",
    (
        "edge_agent",
        "emulated",
    ): "the agent and the base roles on emulated arm64 and armhf devices (qemu-user)",
}


def molecule_scenarios() -> list[tuple[str, str]]:
    """(role, scenario) for every molecule scenario in the kit."""
    found = []
    for scenario in sorted(REPO.glob("roles/*/molecule/*/molecule.yml")):
        found.append((scenario.parents[2].name, scenario.parent.name))
    return found


def _molecule(role: str, scenario: str, env: dict[str, str] | None = None) -> Step:
    return lambda tail: _stream(["molecule", "test", "-s", scenario], REPO / "roles" / role, tail, env)


def lint_phases() -> list[tuple[str, Step]]:
    return [
        ("yamllint", _cmd("yamllint", "--strict", ".")),
        ("ansible-lint", _cmd("ansible-lint", "--profile", "production", "--offline")),
        ("ruff", _cmd("ruff", "check", ".")),
        ("ruff format", _cmd("ruff", "format", "--check", ".")),
        ("mypy", _cmd("mypy")),
        ("role README tables", _cmd(VENV_BIN / "python", "-m", "pikit.roledocs", "--check")),
    ]


def test_phases() -> list[tuple[str, Step]]:
    python = VENV_BIN / "python"
    phases = [
        *lint_phases(),
        ("artifact cache", _cmd(python, "-m", "pikit.artifacts")),
        ("unit tests", _cmd(python, "-m", "pytest", "-q", "-n", "2", "tests/unit")),
        ("integration tests", _cmd(python, "-m", "pytest", "-q", "tests/integration")),
    ]
    phases += [
        (f"molecule {r}/{s}", _molecule(r, s)) for r, s in molecule_scenarios() if (r, s) not in OPS_SCENARIOS
    ]
    phases.append(
        (
            "end-to-end (site.yml on the lab)",
            _cmd(python, "-m", "pytest", "-q", "-s", "-m", "not ops", "tests/e2e"),
        )
    )
    return phases


def ops_phases() -> list[tuple[str, Step]]:
    """What `make test` leaves out for time: the heavier molecule scenarios, and the end-to-end
    suite with its `ops` scenarios (every certificate renewed, the CA rotated, under load) among the
    others."""
    for (role, scenario), why in OPS_SCENARIOS.items():
        say(f"    {role}/{scenario}: {why}")
    python = VENV_BIN / "python"
    return [(f"molecule {r}/{s}", _molecule(r, s, {"KAFKA_TEST_OPS": "1"})) for r, s in OPS_SCENARIOS] + [
        ("end-to-end with the ops scenarios", _cmd(python, "-m", "pytest", "-q", "-s", "tests/e2e"))
    ]


def demo_phases() -> list[tuple[str, Step]]:
    python = VENV_BIN / "python"
    return [
        ("artifact cache", _cmd(python, "-m", "pikit.artifacts")),
        ("lab up", _cmd(python, "-m", "pikit.lab", "up")),
        ("site.yml", _cmd("ansible-playbook", "playbooks/site.yml")),
        ("show", _cmd(python, "-m", "pikit.demo")),
    ]


PIPELINES = {"test": test_phases, "test-ops": ops_phases, "demo": demo_phases, "lint": lint_phases}


def run_pipeline(name: str) -> int:
    results: list[tuple[str, float, int]] = []
    started = time.monotonic()
    tail: list[str] = []
    for title, step in PIPELINES[name]():
        say(f"==> [{name}] {title}")
        t0 = time.monotonic()
        tail.clear()
        rc = step(tail)
        elapsed = time.monotonic() - t0
        results.append((title, elapsed, rc))
        say(f"<== [{name}] {title}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {elapsed:.1f}s")
        if rc != 0:
            break
    say(f"\n{name}: phase times")
    for title, elapsed, rc in results:
        say(f"  {title:<32} {elapsed:7.1f}s  {'ok' if rc == 0 else 'FAILED'}")
    say(f"  {'total':<32} {time.monotonic() - started:7.1f}s")
    failed = sum(1 for _, _, rc in results if rc != 0)
    say(f"phases: {len(results) - failed} passed, {failed} failed")
    if failed:
        say(f"\nwhy {results[-1][0]} failed (the lines of its output that say so):")
        for line in failure_digest(tail) or tail[-20:]:
            say(f"  | {line}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pipeline", choices=sorted(PIPELINES))
    args = parser.parse_args(argv)
    sys.exit(run_pipeline(args.pipeline))


if __name__ == "__main__":
    main()
