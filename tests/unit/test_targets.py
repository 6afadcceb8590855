"""The phase runner behind `make test` and `make demo`: a failed phase says why at the end."""

from __future__ import annotations

from pathlib import Path

from pikit.targets import OPS_SCENARIOS, _stream, failure_digest, molecule_scenarios, ops_phases, test_phases


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
    in_test = {title for title, _ in test_phases()}
    in_ops = {title for title, _ in ops_phases()}
    for role, scenario in scenarios:
        title = f"molecule {role}/{scenario}"
        assert (title in in_test) != (title in in_ops), f"{title}: in exactly one of make test, make test-ops"
