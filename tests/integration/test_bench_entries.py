"""Every benchmark runs from a fresh clone: each `bench` entry at a tiny size, so that a rename
cannot break one silently (bench.parse once loaded its "before" parser from a module that had
moved). The figures stay in the benchmarks (bench/README.md); this asserts only that each runs.

The entries that need the demo's lab (or an emulated one) are imported and parse their options
here; make test's end-to-end lab is torn down by its own suite."""

from __future__ import annotations

import os
import subprocess

import pytest

from pikit import REPO

TINY = {
    "agent_drain": ["--readings", "2000", "--rounds", "1"],
    "agent_footprint": ["--backlog", "2000", "--seconds", "5"],
    "spool_write": ["--readings", "2000", "--rounds", "1"],
    "sink_send": ["--records", "200", "--rounds", "1", "--partitions", "2"],
    "parse": ["--records", "200", "--rounds", "1"],
    "batch": ["--records", "200", "--rounds", "1"],
    "fold_placement": ["--devices", "4", "--executors", "1", "--batches", "1", "--warm", "0"],
}
# On the demo's lab (make demo first), or their own: only their start is tried here.
NEEDS_A_LAB = (
    "batch_cost",
    "catchup",
    "pipeline",
    "restart_cost",
    "agent_emulated",
    "mirror",
    "txclient_trial",
)


def test_every_entry_is_listed_here() -> None:
    entries = {path.stem for path in (REPO / "bench").glob("*.py") if "__main__" in path.read_text()}
    assert entries - {"spark_count"} == set(TINY) | set(NEEDS_A_LAB)  # spark_count: catchup submits it


# Each JVM these start (Spark's local driver) on C1 and the serial collector, as the apps' are: at
# a tiny size, JIT compiling is most of the work, and C2's took bench.parse 98 core-seconds against 53
# and bench.batch 78 against 34 (measured alone, 2 cores). The benchmarks' own runs keep the JVM's
# defaults; this only asserts that each entry runs.
QUICK_JVM = {"JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def _run(entry: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / ".venv/bin/python"), "-m", f"bench.{entry}", *args],
        cwd=REPO,
        env={**os.environ, **QUICK_JVM},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize("entry", sorted(TINY))
def test_a_bench_entry_runs_at_a_tiny_size(entry: str) -> None:
    proc = _run(entry, *TINY[entry])
    assert proc.returncode == 0, (
        f"bench.{entry}: exit {proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}"
    )
    assert "median" in proc.stdout or "|" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize("entry", NEEDS_A_LAB)
def test_a_lab_bench_entry_imports_and_parses_its_options(entry: str) -> None:
    proc = _run(entry, "--help")
    assert proc.returncode == 0, f"bench.{entry} --help: {(proc.stdout + proc.stderr)[-3000:]}"
    assert "usage:" in proc.stdout
