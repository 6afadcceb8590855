"""The end-to-end suite's one lab and its order: the scenarios of every test_*.py here run one after
another, in ORDER, on one converged lab (the `site` fixture, made once per session). And evidence of
a failed test: the apps' journals since the lab came up, kept, and their tail printed. CI keeps only
what a run prints, and the lab is gone by the time anyone reads it. The journals start with the lab,
not with the test: a test that fails at its first line failed on what came before it."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Generator, Iterator

import pytest
from pikit_dev import lab
from pikit_testkit.nemesis import SiteNodes, apps_journal

from pikit import REPO
from tests.e2e import harness
from tests.e2e.harness import (
    APPS,
    LAB,
    SUBNET_FROM,
    SUBNET_TO,
    SUITE,
    SYNTHETIC,
    Site,
    done_alone,
    done_alone_if_last,
)

TAIL = 40
# The scenarios in the order they run on the one lab: each leaves the site as the next expects it
# (the converge first, the whole output and a second site.yml near the end, records deleted last).
ORDER = (
    "test_site_converges",
    # Second, while the suite has the machine to itself (make test's molecule lane waits for its
    # takeover and replacement: harness.done_alone).
    "test_the_drivers_pi_lost_for_good_the_standby_takes_over_and_the_output_stays_exact",
    "test_every_unit_the_kit_writes_is_sandboxed_to_the_bar",
    "test_the_firewall_drops_a_stranger_and_lets_the_cluster_through",
    "test_the_spark_master_refuses_an_unauthenticated_kill",
    "test_every_service_serves_its_metrics",
    "test_every_endpoint_the_kit_serves_passes_promtool",
    "test_status_says_healthy_with_every_part_named",
    "test_the_kafka_roles_own_verifier_passes_on_this_lab",
    "test_bad_input_is_dead_lettered_and_a_late_device_keeps_every_window",
    "test_a_stolen_device_revoked_while_it_sends_is_refused_then_restored",
    "test_one_broker_down_then_every_broker_killed_90_s_mid_commit_heals_within_a_minute",
    "test_a_device_cut_off_with_the_driver_and_its_agent_killed_loses_nothing",
    "test_every_executor_killed_in_a_folds_transaction_loses_nothing",
    "test_the_standby_drivers_pi_lost_for_good_the_apps_keep_their_drivers_and_stay_exact",
    "test_the_masters_pi_lost_for_good_the_apps_run_on_and_register_with_its_replacement",
    "test_a_short_seeded_nemesis_heals_each_fault_within_its_bound",
    "test_a_long_seeded_nemesis_heals_each_fault_within_its_bound",
    "test_a_device_flooding_at_20_times_its_quota_is_held_to_it",
    "test_one_broker_frozen_90_s_both_apps_keep_committing",
    "test_a_frozen_driver_is_named_and_restarted_by_its_watchdog",
    "test_a_frozen_agent_is_restarted_by_its_watchdog",
    "test_a_worker_decommissioned_while_the_apps_run_keeps_them_exact",
    "test_every_certificate_renewed_while_the_agents_produce",
    "test_the_ca_rotated_while_the_agents_produce",
    "test_the_fleet_reflashed_one_pi_at_a_time_while_the_agents_produce",
    "test_a_release_of_a_new_contract_version_waits_for_the_apps",
    "test_the_daily_rollup_starts_from_its_timer_unit",
    "test_the_whole_output_after_the_agents_stop",
    "test_records_deleted_before_a_time_while_the_apps_run_leave_later_windows_exact",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end tests in ORDER, whatever file holds them; a test missing from ORDER fails."""
    e2e = [item for item in items if "tests/e2e/" in str(item.path)]
    unknown = [item.name for item in e2e if item.originalname not in ORDER]  # type: ignore[attr-defined]
    assert not unknown, f"add these to tests/e2e/conftest.py ORDER: {unknown}"
    rest = [item for item in items if item not in e2e]
    e2e.sort(key=lambda item: ORDER.index(item.originalname))  # type: ignore[attr-defined]
    items[:] = rest + e2e


def pytest_collection_finish(session: pytest.Session) -> None:
    """Name the last selected `alone` scenario, once `-m` has deselected what the run leaves out.
    The `alone` scenarios run first, with the machine to themselves, while the other lane (make
    test's molecule scenarios, make test-ops' second lane) waits (harness.done_alone): their bounds
    are on a takeover or a re-registration, which a busy machine stretches."""
    selected = [item.originalname for item in session.items if item.get_closest_marker("alone")]  # type: ignore[attr-defined]
    os.environ[harness.ALONE_UNTIL_ENV] = selected[-1] if selected else ""


FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
        # Whatever happened: the other lane waits for the `alone` scenarios to end, not to pass.
        done_alone_if_last(item.originalname)  # type: ignore[attr-defined]
    return report


def pytest_sessionfinish() -> None:
    done_alone()  # a suite that ended early holds no one up


# When the session's lab came up (epoch seconds): where a failed test's journals start.
LAB_UP = pytest.StashKey[float]()


@pytest.fixture(autouse=True)
def journals_of_a_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not request.node.stash.get(FAILED, False) or "site" not in request.fixturenames:
        return
    site = request.getfixturevalue("site")
    since = request.session.stash.get(LAB_UP, time.time() - 600)
    text = apps_journal(SiteNodes.from_inventory(site.inventory, APPS), since - 5)
    path = site.logs / f"{request.node.name}.journal"
    path.write_text(text)
    lines = text.splitlines()
    name = request.node.name
    print(
        f"\n[evidence] the apps' journals since the lab came up ({len(lines)} lines) in {path}, "
        f"{name} failed; the last {TAIL}:"
    )
    for line in lines[-TAIL:]:
        print(f"  | {line[:300]}")


# One lab for the whole suite: every scenario file shares it.
@pytest.fixture(scope="session")
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("e2e")
    shutil.copytree(REPO / "inventory/lab", root / "inventory")
    for path in (root / "inventory").rglob("*.yml"):
        text = path.read_text().replace(SUBNET_FROM, SUBNET_TO)
        text = re.sub(r"\b((?:pi|edge)-\d+)\b", r"e2e-\1", text)
        text = re.sub(
            r"(?m)^pikit_device_signing_extra: .*$", f"pikit_device_signing_extra: {SYNTHETIC}", text
        )
        text = re.sub(r"(?m)^lab_suite: .*$", f"lab_suite: {SUITE}", text)
        path.write_text(re.sub(r"(?m)^lab_name: .*$", f"lab_name: {LAB}", text))
    site = Site(root)
    lab.down(LAB)
    lab.up(lab.spec_from_inventory(site.inventory))
    request.session.stash[LAB_UP] = time.time()
    try:
        yield site
    finally:
        lab.down(LAB)
