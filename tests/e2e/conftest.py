"""Evidence of a failed end-to-end test: the apps' journals over the test, kept and their tail
printed. CI keeps only what a run prints, and the lab is gone by the time anyone reads it."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator

import pytest
from pikit_testkit.nemesis import SiteNodes, apps_journal

# The streaming apps the e2e lab runs (tests/e2e/test_site.py).
APPS = ("sensor_aggregates", "anomaly_alerts")
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


@pytest.fixture(autouse=True)
def journals_of_a_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.time()
    yield
    if not request.node.stash.get(FAILED, False) or "site" not in request.fixturenames:
        return
    site = request.getfixturevalue("site")
    text = apps_journal(SiteNodes.from_inventory(site.inventory, APPS), started - 5)
    path = site.logs / f"{request.node.name}.journal"
    path.write_text(text)
    lines = text.splitlines()
    name = request.node.name
    print(f"\n[evidence] the apps' journals over {name} ({len(lines)} lines) in {path}; the last {TAIL}:")
    for line in lines[-TAIL:]:
        print(f"  | {line[:300]}")
