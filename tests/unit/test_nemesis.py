"""The nemesis's schedule: the same seed gives the same faults, the commit faults are in every
schedule, a long one holds every kind, and each fault's targets and length fit its kind."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pikit_contract.failpoints import SINK_POINTS
from pikit_testkit import nemesis
from pikit_testkit.nemesis import (
    ALWAYS,
    BROKERS_KILLED,
    COMMIT_HELD,
    COMMIT_HELD_OUTAGE_S,
    DISK_FILLED,
    KINDS,
    MASTER_DOWN,
    MASTER_KILLED,
    RIDDEN_THROUGH,
    Fault,
    Recovery,
    SiteNodes,
    schedule,
    summary,
)

SITE = SiteNodes(
    brokers=("pi-1", "pi-2", "pi-3"),
    workers=("pi-2", "pi-3"),
    master="pi-4",
    edges=("edge-1", "edge-2"),
    apps=("sensor_aggregates", "anomaly_alerts"),
    drivers=("pi-4",),
)


def test_a_seed_replays_its_schedule_and_another_seed_differs() -> None:
    assert schedule(7, 6, SITE) == schedule(7, 6, SITE)
    assert schedule(7, 6, SITE) != schedule(8, 6, SITE)


def test_a_short_schedule_holds_the_commit_faults() -> None:
    for seed in range(50):
        kinds = [f.kind for f in schedule(seed, 6, SITE)]
        assert len(kinds) == 6
        assert set(ALWAYS) <= set(kinds), (seed, kinds)


def test_a_schedule_draws_only_its_kinds_and_holds_what_it_must() -> None:
    kinds = tuple(k for k in KINDS if k != COMMIT_HELD)
    for seed in range(50):
        drawn = [f.kind for f in schedule(seed, 4, SITE, kinds=kinds, always=(BROKERS_KILLED,))]
        assert COMMIT_HELD not in drawn and BROKERS_KILLED in drawn, (seed, drawn)


def test_a_long_schedule_holds_every_kind() -> None:
    faults = schedule(1, 30, SITE)
    assert len(faults) == 30
    assert {f.kind for f in faults} == set(KINDS)


def test_each_fault_fits_its_kind() -> None:
    for fault in schedule(3, 300, SITE, longest=180):
        assert 5 <= fault.quiet <= 30
        if fault.kind == BROKERS_KILLED:
            assert set(fault.targets) <= set(SITE.brokers) and 1 <= len(fault.targets) <= 3
            assert 5 <= fault.seconds <= 180
        elif fault.kind == COMMIT_HELD:
            assert fault.seconds == COMMIT_HELD_OUTAGE_S
        elif fault.kind == DISK_FILLED:
            assert len(fault.targets) == 1 and fault.targets[0] in SITE.brokers
            assert 30 <= fault.seconds <= 120
            assert fault.kind in RIDDEN_THROUGH, "the topics' bounds leave the brokers room"
        elif fault.kind in (MASTER_KILLED, MASTER_DOWN):
            assert fault.targets == (SITE.master,)
            assert fault.seconds == 0 if fault.kind == MASTER_KILLED else 5 <= fault.seconds <= 60
        if fault.kind.startswith("commit") or fault.kind == "driver-cut":
            # The node is the app's active driver's, found when the fault lands.
            assert fault.targets == ("sensor_aggregates",), "the app whose sink commits every window"
        if fault.kind.startswith("commit"):
            assert fault.point in SINK_POINTS
        else:
            assert not fault.point
    brokers_killed = [f for f in schedule(3, 300, SITE) if f.kind == BROKERS_KILLED]
    assert {len(f.targets) for f in brokers_killed} == {1, 2, 3}, "one, two or all three brokers"


def test_the_summary_gives_the_median_and_the_worst_fault() -> None:
    slow = Fault("device-cut", ("edge-1",), 60, 5)
    recoveries = [Recovery(Fault("agent-killed", ("edge-2",), 0, 5), 0, s) for s in (10, 20)]
    text = summary([*recoveries, Recovery(slow, 0, 50)])
    assert text == "3 faults; recovery p50 20s, max 50s (device-cut edge-1 for 60s)"


def test_every_kind_has_a_bound_and_the_fast_kinds_are_held_to_a_minute() -> None:
    assert set(nemesis.RECOVERY_BOUNDS) == set(KINDS)
    fast = {"brokers-killed", "broker-frozen", "commit-held-brokers-killed", "driver-cut", "device-cut"}
    fast |= {"agent-killed", "disk-filled", "master-killed", "master-down"}
    assert {kind for kind, bound in nemesis.RECOVERY_BOUNDS.items() if bound <= 60} == fast


def test_a_recovery_past_its_kinds_bound_is_named_and_the_scoreboard_marks_its_kind() -> None:
    cut = Fault("device-cut", ("edge-1",), 60, 5)
    restarted = Fault("executor-killed", ("pi-2",), 0, 5)
    recoveries = [Recovery(cut, 0, 12), Recovery(cut, 0, 61), Recovery(restarted, 0, 90)]
    assert nemesis.past_bounds(recoveries) == ["device-cut edge-1 for 60s: 61s, bound 60s"]
    board = nemesis.scoreboard(recoveries).splitlines()
    assert board[1].split() == ["executor-killed", "1", "90s", "90s", "120s"]
    assert board[2].split() == ["device-cut", "2", "36s", "61s", "60s", "PAST"]


def test_an_agents_longest_wait_spans_the_fault_from_the_ack_before_to_the_first_after() -> None:
    watch = nemesis.AckWatch({"edge-1": "10.0.0.21", "edge-2": "10.0.0.22", "edge-3": "10.0.0.23"})
    watch.acks = {
        "edge-1": {95.0, 101.0, 102.0, 140.0, 141.0, 161.0, 162.0},  # one gap of 38 s in the fault
        "edge-2": {99.0, 175.0},  # nothing from before the fault until 15 s after its end
        "edge-3": {99.0},  # none after it: the wait runs to the last look
    }
    watch.last_look = 190.0
    assert watch.longest_waits(100.0, 160.0) == {"edge-1": 38.0, "edge-2": 76.0, "edge-3": 91.0}


def test_an_agent_past_its_wait_is_named_and_on_the_scoreboard() -> None:
    frozen = Fault("broker-frozen", ("pi-1",), 60, 5)
    recoveries = [
        Recovery(frozen, 0, 8, {}, {"edge-1": 12, "edge-2": 61}),
        Recovery(frozen, 0, 8, {}, {"edge-1": 3}),
    ]
    assert nemesis.agents_past_bound(recoveries) == [
        "broker-frozen pi-1 for 60s: edge-1 12s, edge-2 61s, bound 60s"
    ]
    assert nemesis.scoreboard(recoveries).splitlines()[-1].split()[-5:] == ["3", "12s", "61s", "60s", "PAST"]


def test_a_disk_is_filled_to_its_guard_and_emptied_again(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def sh(node: str, script: str, check: bool = True) -> str:
        ran.append(f"{node}: {script}")
        return "1000000 150000\n" if script.startswith("df ") else ""

    monkeypatch.setattr(nemesis, "sh", sh)
    with pytest.raises(RuntimeError), nemesis.disk_filled("pi-2"):
        assert ran[-1] == "pi-2: fallocate -l 700000 /srv/pikit/kafka/nemesis-filler", "to 85 %"
        raise RuntimeError("the fault's wait ended badly")
    assert ran[-1] == "pi-2: rm -f /srv/pikit/kafka/nemesis-filler", "the filler goes, whatever happened"


def test_a_slow_recovery_keeps_the_apps_journals(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    asked: list[str] = []

    def sh(node: str, script: str, check: bool = True) -> str:
        asked.append(f"{node}: {script}")
        return "WARNING pikit.sink: the driver's last words\n"

    monkeypatch.setattr(nemesis, "sh", sh)
    lines: list[str] = []
    nemesis.Nemesis(SITE, log=lines.append, journals=tmp_path).keep_journals(3, 1000.0, 1100.0)
    assert asked == [
        "pi-4: journalctl -u spark-app-sensor-aggregates -u spark-app-anomaly-alerts "
        "--since @995 --until @1105 -o short-precise --no-pager"
    ]
    assert (tmp_path / "fault-3.log").read_text() == "WARNING pikit.sink: the driver's last words\n"
    assert "fault-3.log" in lines[0]
    assert lines[1:] == ["  | WARNING pikit.sink: the driver's last words"], "printed too, for CI's log"

    monkeypatch.setattr(nemesis, "sh", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("gone")))
    nemesis.Nemesis(SITE, journals=tmp_path).keep_journals(4, 0, 1)  # evidence only: never fails the run
    assert not (tmp_path / "fault-4.log").exists()


def test_a_slow_recoverys_digest_keeps_the_telling_lines_last_and_cut() -> None:
    journal = "\n".join(
        [
            "spark-submit[1]: 26/11/26 21:23:22 WARN KafkaOffsetReaderAdmin: Error in attempt 1",
            "spark-submit[1]: at org.apache.kafka.clients.admin.KafkaAdminClient.call",
            "spark-submit[1]: 2026-11-26 21:23:46,610 WARNING pikit.sink: batch 6: attempt 1 failed",
            "spark-submit[1]: 2026-11-26 21:23:51,396 INFO pikit: batch 6: read 1.4s, kafka 14.9s",
            "spark-submit[1]: 2026-11-26 21:23:51,400 INFO kafka.cluster: Updated metadata",
            "spark-submit[1]: 2026-11-26 21:23:52,000 ERROR kafka.net.connection: " + "x" * 400,
        ]
    )
    digest = nemesis.journal_digest(journal, limit=3, width=100)
    assert [line[:40] for line in digest] == [
        "spark-submit[1]: 2026-11-26 21:23:46,610",
        "spark-submit[1]: 2026-11-26 21:23:51,396",
        "spark-submit[1]: 2026-11-26 21:23:52,000",
    ]
    assert all(len(line) <= 100 for line in digest)
    assert len(nemesis.journal_digest(journal)) == 4  # the stack line and kafka's INFO are left out
    retrying = "\n".join(
        f"spark-submit[2]: 22:36:{s:02} WARN NetworkClient: Error connecting to node 10.89.83.1{s % 3}:9092"
        for s in range(30)
    )
    digest = nemesis.journal_digest(journal + "\n" + retrying)
    assert len(digest) == 5, digest  # one line for the thirty retries, the last
    assert digest[-1].endswith("10.89.83.12:9092") and "22:36:29" in digest[-1]


def test_the_command_line_refuses_a_kind_it_does_not_know(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        nemesis.main(["--kinds", "master-down,pi-unplugged"])
    assert exited.value.code == 2
    assert "unknown kinds ['pi-unplugged']" in capsys.readouterr().err


def test_chosen_kinds_keep_the_always_kinds_among_them_and_name_an_unknown_one() -> None:
    assert nemesis.chosen_kinds(f"{MASTER_DOWN},{COMMIT_HELD}", KINDS) == (
        (MASTER_DOWN, COMMIT_HELD),
        (COMMIT_HELD,),
    )
    with pytest.raises(ValueError, match=r"unknown kinds \['pi-lost'\]"):
        nemesis.chosen_kinds(nemesis.PI_LOST, (MASTER_DOWN,))


def test_a_schedule_of_chosen_kinds_draws_only_those() -> None:
    kinds = (MASTER_DOWN, MASTER_KILLED)
    faults = schedule(7, 6, SITE, kinds=kinds, always=())
    assert {fault.kind for fault in faults} == set(kinds)
    assert all(fault.targets == (SITE.master,) for fault in faults)


def test_a_pi_lost_for_good_is_any_pi_of_the_cluster_never_a_device() -> None:
    lost = [
        f for f in schedule(5, 300, SITE, kinds=(nemesis.PI_LOST,), always=()) if f.kind == nemesis.PI_LOST
    ]
    assert {f.targets for f in lost} == {("pi-1",), ("pi-2",), ("pi-3",), ("pi-4",)}
    assert all(f.seconds == 0 for f in lost), "nothing brings it back but its replacement"
    assert nemesis.RECOVERY_BOUNDS[nemesis.PI_LOST] == 120, "issue 66: every output within 120 s"


def test_a_pi_lost_is_refused_without_a_lab_that_replaces_it_and_left_out_of_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ValueError, match="re-flashes"):
        nemesis.Nemesis(SITE).inflict(Fault(nemesis.PI_LOST, ("pi-2",), 0, 5))
    with pytest.raises(SystemExit):
        nemesis.main(["--kinds", nemesis.PI_LOST])
    assert "unknown kinds ['pi-lost']" in capsys.readouterr().err


def test_a_pi_lost_recovers_twice_and_its_worst_pause_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lost, the site flows again without it (the takeover); replaced, it flows again after the
    replacement; the fault's recovery is the longest of those and of any pause until the
    replacement has settled (drivers registering anew with a new master)."""
    done: list[str] = []
    clock = itertools.count(1000, 10)
    monkeypatch.setattr("pikit_testkit.nemesis.time.time", lambda: float(next(clock)))
    monkeypatch.setattr("pikit_testkit.nemesis.time.sleep", lambda seconds: None)
    pis = nemesis.PiLifecycle(
        lose=lambda pi: done.append(f"lost {pi}"), replace=lambda pi: done.append(f"new {pi}")
    )
    lines: list[str] = []
    chaos = nemesis.Nemesis(SITE, log=lines.append, pis=pis)
    recoveries = iter([0.0, 55.0, 20.0])  # before the schedule, after the loss, after the replacement
    monkeypatch.setattr(chaos, "wait_recovered", lambda since: since + next(recoveries))
    monkeypatch.setattr(
        chaos, "longest_pause", lambda start, end: {"sensor_aggregates": 84.0, "anomaly_alerts": 30.0}
    )
    (recovery,) = chaos.run([Fault(nemesis.PI_LOST, ("pi-4",), 0, 0)])
    assert done == ["lost pi-4", "new pi-4"]
    assert recovery.seconds == 84.0, "the longest pause since the loss, past the takeover's 55 s"
    assert any("pi-4 replaced" in line and "sensor_aggregates 84s" in line for line in lines)


def test_a_metrics_page_gives_its_unlabelled_sample_and_names_one_it_lacks() -> None:
    page = (
        "# TYPE edge_agent_spool_depth gauge\n"
        "edge_agent_spool_depth_bytes 4096\n"
        "edge_agent_spool_depth 17\n"
        'edge_agent_info{release="0.1.1"} 1\n'
    )
    assert nemesis.sample(page, "edge_agent_spool_depth") == 17.0, (
        "not the _bytes series that shares its prefix"
    )
    with pytest.raises(KeyError, match="edge_agent_last_success_timestamp_seconds"):
        nemesis.sample(page, "edge_agent_last_success_timestamp_seconds")


def test_a_pause_counts_the_commits_a_restarted_driver_emptied_from_its_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A driver that starts again empties its scratch checkpoint: the commits before its restart
    are gone from it, and only its journal's progress lines tell them. Both count."""
    journal = (
        "1000.5 pi-3 spark-submit[1]: INFO pikit: query anomaly_alerts batch 7: 14 rows in, 8.0 rows/s\n"
        "1001.0 pi-3 spark-submit[1]: INFO pikit.sink: batch 8: committed 0 to sensor-alerts\n"
        "1002.0 pi-3 spark-submit[2]: INFO pikit: query sensor_aggregates batch 9: 14 rows in\n"
        "1060.25 pi-3 spark-submit[1]: INFO pikit: query anomaly_alerts batch 8: 15 rows in, 9.0 rows/s\n"
        "1061.0 pi-3 spark-submit[1]: INFO pikit: query anomaly_alerts started (id 1)\n"
    )
    assert nemesis.progress_times(journal, "anomaly_alerts") == [1000.5, 1060.25]
    chaos = nemesis.Nemesis(SITE)
    checkpoint = {"sensor_aggregates": [1010.0, 1100.0], "anomaly_alerts": [1100.0]}  # after the restart
    logged = {"sensor_aggregates": [1010.0, 1040.0], "anomaly_alerts": [1030.0, 1060.0]}  # before it too
    lines = sorted(
        f"{t} pi-3 spark-submit[1]: INFO pikit: query {app} batch 1: 1 rows in"
        for app in logged
        for t in logged[app]
    )
    monkeypatch.setattr(chaos, "commits_since", lambda app, moment: checkpoint[app])
    monkeypatch.setattr(nemesis, "apps_journal", lambda site, since, output: "\n".join(lines))
    assert chaos.longest_pause(1000.0, 1120.0) == {"sensor_aggregates": 60.0, "anomaly_alerts": 40.0}


def test_the_agents_deliver_through_every_fault_but_two_brokers_down_save_the_one_cut_or_killed() -> None:
    edges = SITE.edges
    assert nemesis.agents_delivering(Fault(BROKERS_KILLED, ("pi-2",), 30, 5), edges) == edges
    assert nemesis.agents_delivering(Fault(BROKERS_KILLED, ("pi-1", "pi-2"), 30, 5), edges) == ()
    assert nemesis.agents_delivering(Fault(COMMIT_HELD, ("sensor_aggregates",), 90, 5), edges) == ()
    assert nemesis.agents_delivering(Fault(nemesis.DEVICE_CUT, ("edge-2",), 60, 5), edges) == ("edge-1",)
    assert nemesis.agents_delivering(Fault(nemesis.AGENT_KILLED, ("edge-1",), 0, 5), edges) == ("edge-2",)
    for kind in (nemesis.BROKER_FROZEN, DISK_FILLED, MASTER_DOWN, nemesis.DRIVER_CUT, nemesis.PI_LOST):
        assert nemesis.agents_delivering(Fault(kind, ("pi-3",), 30, 5), edges) == edges, kind
