"""Evidence of a failed end-to-end test: the apps' journals over the test, kept and their tail
printed. CI keeps only what a run prints, and the lab is gone by the time anyone reads it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Generator, Iterator

import pytest

# The master's container in the e2e lab and the apps' units on it (tests/e2e/test_site.py).
MASTER = "e2e-pi-4"
UNITS = ("spark-app-sensor-aggregates", "spark-app-anomaly-alerts")
TAIL = 40
FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    return report


def journals_since(started: float) -> str:
    units = " ".join(f"-u {unit}" for unit in UNITS)
    script = f"journalctl {units} --since @{started - 5:.0f} -o short-precise --no-pager"
    proc = subprocess.run(
        ["podman", "exec", MASTER, "sh", "-c", script], capture_output=True, text=True, check=False
    )
    return proc.stdout + proc.stderr


@pytest.fixture(autouse=True)
def journals_of_a_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.time()
    yield
    if not request.node.stash.get(FAILED, False) or "site" not in request.fixturenames:
        return
    text = journals_since(started)
    site = request.getfixturevalue("site")
    path = site.logs / f"{request.node.name}.journal"
    path.write_text(text)
    lines = text.splitlines()
    name = request.node.name
    print(f"\n[evidence] the apps' journals over {name} ({len(lines)} lines) in {path}; the last {TAIL}:")
    for line in lines[-TAIL:]:
        print(f"  | {line[:300]}")
