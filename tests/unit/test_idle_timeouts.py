"""On an idle lab, each test's timeout stretches as its waits do (pikit_testkit.idle_timeouts)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SLOW = """
import time
import pytest

@pytest.mark.timeout(1)
def test_marked():
    time.sleep(2)

def test_by_the_ini_default():
    time.sleep(2)
"""


@pytest.mark.parametrize(("idle", "passed"), [("1", 2), ("0", 0)])
def test_an_idle_lab_stretches_each_tests_timeout_four_times(tmp_path: Path, idle: str, passed: int) -> None:
    (tmp_path / "test_slow.py").write_text(SLOW)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p pikit_testkit.idle_timeouts\ntimeout = 1\n")
    env = {**os.environ, "PIKIT_LAB_IDLE": idle}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    summary = run.stdout.strip().splitlines()[-1]
    assert f"{passed} passed" in summary if passed else "2 failed" in summary, run.stdout[-2000:]
