"""The verifiers read a playbook run's PLAY RECAP to judge idempotence (pikit_testkit.molecule_lab)."""

from __future__ import annotations

import subprocess

from pikit_testkit.molecule_lab import changed, recap

OUTPUT = """\
PLAY RECAP *********************************************************************
site-w1                    : ok=128  changed=0    unreachable=0    failed=0    skipped=41
site-w2                    : ok=124  changed=2    unreachable=0    failed=0    skipped=41

TASKS RECAP ********************************************************************
connect : Reconcile the connectors -------------------------------------- 3.10s
"""


def test_each_hosts_counts_are_read_and_changed_sums_them() -> None:
    assert recap(OUTPUT)["site-w2"] == {
        "ok": 124,
        "changed": 2,
        "unreachable": 0,
        "failed": 0,
        "skipped": 41,
    }
    run = subprocess.CompletedProcess(["ansible-playbook"], 0, stdout=OUTPUT, stderr="")
    assert changed(run) == changed(OUTPUT) == 2
    assert changed(OUTPUT.replace("changed=2", "changed=0")) == 0


def test_a_run_without_a_recap_changed_nothing_it_can_count() -> None:
    assert recap("ERROR! the playbook could not be found") == {}
