"""The make targets that chain several phases (`make test`, `make demo`).

Each phase prints its start and duration; a summary table closes the run. A
failing phase stops the pipeline, names itself, and (for demo phases that log
to a file) shows the log tail.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pikit.phases import say

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv/bin"


def _cmd(*argv: str | Path) -> Callable[[], int]:
    def step() -> int:
        env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
        return subprocess.run([str(a) for a in argv], cwd=REPO, env=env, check=False).returncode

    return step


def molecule_scenarios() -> list[tuple[str, str]]:
    """(role, scenario) for every molecule scenario in the kit."""
    found = []
    for scenario in sorted(REPO.glob("roles/*/molecule/*/molecule.yml")):
        found.append((scenario.parents[2].name, scenario.parent.name))
    return found


def _molecule(role: str, scenario: str) -> Callable[[], int]:
    def step() -> int:
        env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
        return subprocess.run(
            ["molecule", "test", "-s", scenario], cwd=REPO / "roles" / role, env=env, check=False
        ).returncode

    return step


def lint_phases() -> list[tuple[str, Callable[[], int]]]:
    return [
        ("yamllint", _cmd("yamllint", "--strict", ".")),
        ("ansible-lint", _cmd("ansible-lint", "--profile", "production", "--offline")),
        ("ruff", _cmd("ruff", "check", ".")),
        ("ruff format", _cmd("ruff", "format", "--check", ".")),
        ("mypy", _cmd("mypy")),
    ]


def test_phases() -> list[tuple[str, Callable[[], int]]]:
    python = VENV_BIN / "python"
    phases = [
        *lint_phases(),
        ("artifact cache", _cmd(python, "-m", "pikit.artifacts")),
        ("unit tests", _cmd(python, "-m", "pytest", "-q", "tests/unit")),
        ("integration tests", _cmd(python, "-m", "pytest", "-q", "tests/integration")),
    ]
    phases += [(f"molecule {r}/{s}", _molecule(r, s)) for r, s in molecule_scenarios()]
    phases.append(("end-to-end (site.yml on the lab)", _cmd(python, "-m", "pytest", "-q", "-s", "tests/e2e")))
    return phases


def demo_phases() -> list[tuple[str, Callable[[], int]]]:
    python = VENV_BIN / "python"
    return [
        ("artifact cache", _cmd(python, "-m", "pikit.artifacts")),
        ("lab up", _cmd(python, "-m", "pikit.lab", "up")),
        ("site.yml", _cmd("ansible-playbook", "playbooks/site.yml")),
        ("show", _cmd(python, "-m", "pikit.demo")),
    ]


PIPELINES = {"test": test_phases, "demo": demo_phases, "lint": lint_phases}


def run_pipeline(name: str) -> int:
    results: list[tuple[str, float, int]] = []
    started = time.monotonic()
    for title, step in PIPELINES[name]():
        say(f"==> [{name}] {title}")
        t0 = time.monotonic()
        rc = step()
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
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pipeline", choices=sorted(PIPELINES))
    args = parser.parse_args(argv)
    sys.exit(run_pipeline(args.pipeline))


if __name__ == "__main__":
    main()
