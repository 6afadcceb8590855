"""The phase runner behind `make test` and `make demo`: a failed phase says why at the end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pikit_dev.cpu_share import IDLE_CONTROLLER
from pikit_dev.targets import (
    OPS_SCENARIOS,
    PIPELINES,
    Background,
    Beside,
    Step,
    _stream,
    failure_digest,
    flat,
    molecule_scenarios,
    ops_phases,
    run_pipeline,
)
from pikit_dev.targets import test_phases as make_test_phases


@pytest.fixture(autouse=True)
def _lab_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Held lanes' logs go under the lab's home: the test's own."""
    monkeypatch.setenv("PIKIT_LAB_HOME", str(tmp_path / "lab"))


def test_a_failed_phase_keeps_the_lines_that_say_why(capfd: object) -> None:
    tail: list[str] = []
    script = (
        "for i in $(seq 50); do echo noise $i; done;"
        " echo '  │ FAILED - RETRYING: wait (3 left)';"
        " echo 'E   AssertionError: missing window (dev-a, 60)';"
        r" printf '\033[31mfatal: [pi-1]: FAILED! => {\"msg\": \"boom\"}\033[0m\n'; exit 3"
    )
    assert _stream(["bash", "-c", script], Path(), tail) == 3
    assert failure_digest(tail) == [
        "E   AssertionError: missing window (dev-a, 60)",
        'fatal: [pi-1]: FAILED! => {"msg": "boom"}',
    ]


def test_every_molecule_scenario_runs_in_test_or_in_test_ops() -> None:
    scenarios = set(molecule_scenarios())
    assert set(OPS_SCENARIOS) <= scenarios, "an ops scenario that no longer exists"
    in_test = {title for title, _ in flat(make_test_phases())}
    in_ops = {title for title, _ in flat(ops_phases())}
    for role, scenario in scenarios:
        title = f"molecule {role}/{scenario}"
        assert (title in in_test) != (title in in_ops), f"{title}: in exactly one of make test, make test-ops"


def test_lanes_run_at_the_same_time_and_a_held_lane_prints_in_one_piece(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def sh(script: str) -> Step:
        return lambda tail: _stream(["bash", "-c", script], Path(), tail)

    # Each lane waits up to 5 s for the other's mark: run one after another, a1 would fail.
    marks = tmp_path
    meet = "touch {d}/{me}; for i in $(seq 100); do test -e {d}/{other} && break; sleep 0.05; done"
    meet += "; test -e {d}/{other}"
    first = [
        ("a1", sh(meet.format(d=marks, me="a", other="b") + "; echo a-says-1")),
        ("a2", sh("echo a-says-2")),
    ]
    second = [("b1", sh(meet.format(d=marks, me="b", other="a") + "; echo b-says-1; echo b-says-2; exit 4"))]
    monkeypatch.setitem(PIPELINES, "lanes", lambda: [Beside([first, second])])
    assert run_pipeline("lanes") == 1
    out = capfd.readouterr().out
    assert "a-says-1" in out and "a-says-2" in out
    held = out.index("b-says-1")
    assert out[held : out.index("b-says-2")] == "b-says-1\n", "a held lane's lines stay together"
    # ... and went to a file as they came, which the pipeline named when the lane started.
    (log,) = (tmp_path / "lab/logs").glob("lanes-lane2-*.log")
    assert f"lane 2's output, as it runs: {log}" in out
    assert "b-says-1\nb-says-2\n" in log.read_text()
    assert "why b1 failed" in out and "FAILED (exit 4)" in out
    assert "phases: 2 passed, 1 failed" in out, "the lanes' wall-time row is not a phase"
    assert re.search(r"a1 \[lane 1\]\s+[\d.]+s  ok", out) and re.search(
        r"b1 \[lane 2\]\s+[\d.]+s  FAILED", out
    )


def test_a_background_lane_runs_beside_the_later_phases_and_the_pipeline_waits_for_it(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def sh(script: str) -> Step:
        return lambda tail: _stream(["bash", "-c", script], Path(), tail)

    # The background phase ends only once the phase after it has begun, and after the last
    # foreground phase has ended: the pipeline must neither run it first nor stop before it ends.
    mark = tmp_path / "begun"
    wait = f"for i in $(seq 200); do test -e {mark} && break; sleep 0.05; done; test -e {mark}"
    background = [("bg", sh(f"{wait}; sleep 0.5; echo bg-says-done"))]
    monkeypatch.setitem(
        PIPELINES,
        "bg",
        lambda: [Background([background]), ("fg1", sh(f"touch {mark}")), ("fg2", sh("echo fg-says-2"))],
    )
    assert run_pipeline("bg") == 0
    out = capfd.readouterr().out
    assert "in the background (pikit_background): bg" in out
    assert out.index("fg-says-2") < out.index("bg-says-done"), "the later phases did not wait for it"
    assert re.search(r"bg \[lane 1\]\s+[\d.]+s  ok", out)
    assert "phases: 3 passed, 0 failed" in out


def test_make_test_runs_lint_first_and_the_bench_entries_once_the_alone_scenarios_ran() -> None:
    first, second = make_test_phases()
    assert isinstance(first, Beside) and isinstance(second, Beside)
    assert "ansible-lint" in {title for lane in first.lanes for title, _ in lane}
    e2e, after_alone = second.lanes
    assert [title for title, _ in e2e] == ["end-to-end (site.yml on the lab)"]
    titles = [title for title, _ in after_alone]
    assert titles[0].startswith("wait for the end-to-end converge") and titles[-1] == "bench entries"


def test_test_ops_runs_the_end_to_end_suite_with_the_molecule_scenarios_idle() -> None:
    """Two lanes that share no lab: both end-to-end runs (one lab name) in the foreground, one after
    the other; the rest from the start in the idle cgroup, their nodes too."""
    image, background, *end_to_end = ops_phases()
    assert not isinstance(image, Beside | Background) and image[0] == "lab image"
    assert isinstance(background, Background) and len(background.lanes) == 2
    assert background.cgroup == IDLE_CONTROLLER and background.keep_going
    waiting, scenarios = ([title for title, _ in lane] for lane in background.lanes)
    titles = [item[0] for item in end_to_end if not isinstance(item, Beside | Background)]
    assert len(titles) == len(end_to_end) == 2 and all(title.startswith("end-to-end") for title in titles)
    assert not any(title.startswith("end-to-end") for title in waiting + scenarios)
    # The scenario that mostly waits (the mirror's 10-minute uplink cut) in a lane of its own,
    # beside those that take CPU; the slowest converge (emulated devices) last, when lane 1 has ended.
    assert waiting == ["molecule connect/mirror"] and scenarios[-1] == "molecule edge_agent/emulated"


def test_a_lane_of_phases_that_share_nothing_runs_each_whatever_failed_before(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def sh(script: str) -> Step:
        return lambda tail: _stream(["bash", "-c", script], Path(), tail)

    lane = [("first", sh("exit 3")), ("second", sh("echo second-ran"))]
    monkeypatch.setitem(PIPELINES, "each", lambda: [Background([lane], keep_going=True)])
    assert run_pipeline("each") != 0
    out = capfd.readouterr().out
    assert "second-ran" in out
    assert "phases: 1 passed, 1 failed" in out
