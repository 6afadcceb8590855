"""The rolling-restart verifier reads what a playbook run did from its task names
(pikit_testkit.molecule_lab): the restarts in their order, and the controller the order took as active."""

from __future__ import annotations

import subprocess

import pytest
from pikit_testkit.molecule_lab import planned_active, restarts

OUTPUT = """\
TASK [kafka : Ask the quorum which controller is active] ***********************
ok: [kafka-1 -> localhost]
TASK [kafka : Order the restart, the active controller last of its tier: kafka-2] ***
ok: [kafka-1]
TASK [rolling_restart : Restart kafka on kafka-1 for server.properties] ********
TASK [rolling_restart : Restart kafka on kafka-3 for server.properties] ********
TASK [rolling_restart : Restart kafka on kafka-2 for server.properties] ********
"""


def run(stdout: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["ansible-playbook"], 0, stdout, "")


def test_the_order_and_the_controller_it_took_as_active_are_read_from_the_task_names() -> None:
    assert planned_active(run(OUTPUT)) == "kafka-2"
    assert [host for host, _ in restarts(run(OUTPUT))] == ["kafka-1", "kafka-3", "kafka-2"]


def test_a_run_that_ordered_no_restart_says_so() -> None:
    with pytest.raises(AssertionError, match="ordered no restart"):
        planned_active(run("TASK [kafka : Gather the facts this role needs] ***\n"))
