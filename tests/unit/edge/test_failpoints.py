"""An armed failpoint kills the agent with SIGKILL, or holds it, once; unarmed it does nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pikit_contract.failpoints import BEFORE_SPOOL_COMMIT

from pikit import REPO

CALL = "import sys; from pikit_contract.failpoints import fire_if_armed as c; c(sys.argv[1], sys.argv[2])"


def test_an_armed_failpoint_kills_once(tmp_path: Path) -> None:
    def run() -> int:
        argv = [sys.executable, "-c", CALL, str(tmp_path), BEFORE_SPOOL_COMMIT]
        env = {**os.environ, "PYTHONPATH": str(REPO / "edge_agent")}
        return subprocess.run(argv, cwd=tmp_path, env=env, check=False).returncode

    assert run() == 0, "unarmed: nothing happens"
    (tmp_path / "failpoints").mkdir()
    (tmp_path / "failpoints" / BEFORE_SPOOL_COMMIT).touch()
    assert run() == -signal.SIGKILL
    assert not (tmp_path / "failpoints" / BEFORE_SPOOL_COMMIT).exists()
    assert run() == 0, "it fired once"


def test_a_hold_failpoint_waits_its_seconds_once_and_goes_on(tmp_path: Path) -> None:
    from pikit_contract.failpoints import fire_if_armed

    (tmp_path / "failpoints").mkdir()
    (tmp_path / "failpoints" / BEFORE_SPOOL_COMMIT).write_text("hold 0.5\n")
    started = time.monotonic()
    fire_if_armed(str(tmp_path), BEFORE_SPOOL_COMMIT)
    assert time.monotonic() - started >= 0.5
    assert not (tmp_path / "failpoints" / BEFORE_SPOOL_COMMIT).exists()
    started = time.monotonic()
    fire_if_armed(str(tmp_path), BEFORE_SPOOL_COMMIT)
    assert time.monotonic() - started < 0.5, "it held once"
