"""The integration tests' Connect worker is stopped as systemd stops the role's unit: SIGTERM, then
SIGKILL after a grace. A worker that hangs on SIGTERM must not fail the test that used it."""

import subprocess
import time
from pathlib import Path

import pytest
from pikit_testkit.connect import LocalWorker


def test_a_worker_that_ignores_sigterm_is_killed_after_its_grace_and_named(tmp_path: Path) -> None:
    worker = LocalWorker.__new__(LocalWorker)
    worker.work = tmp_path
    ready = tmp_path / "trapped"
    script = f"trap '' TERM QUIT; touch {ready}; while :; do sleep 0.1; done"
    worker.proc = proc = subprocess.Popen(["sh", "-c", script])
    while not ready.exists():
        time.sleep(0.05)
    with pytest.warns(UserWarning, match="alive 1 s after SIGTERM, killed"):
        worker.stop(grace=1)
    assert proc.returncode == -9
    assert worker.proc is None
    worker.stop()  # a stopped worker stops again quietly
