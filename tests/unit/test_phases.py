"""pikit.phases.exclusive: two processes that would build the same thing take turns, and the
second says that it waits (make test's lanes ask for the lab image and the artifact cache at once)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HOLDER = """
import sys, time
from pathlib import Path
from pikit.phases import exclusive
log = Path(sys.argv[1])
with exclusive(Path(sys.argv[2]), "the thing"):
    with log.open("a") as f:
        f.write(sys.argv[3] + " in\\n")
    time.sleep(float(sys.argv[4]))
    with log.open("a") as f:
        f.write(sys.argv[3] + " out\\n")
"""


def test_the_second_waits_for_the_first_and_says_so(tmp_path: Path) -> None:
    log, lock = tmp_path / "log", tmp_path / "sub" / "thing.lock"
    first = subprocess.Popen([sys.executable, "-c", HOLDER, log, lock, "first", "1.5"])
    deadline = time.monotonic() + 20
    while not (log.exists() and "first in" in log.read_text()):
        assert time.monotonic() < deadline, "the first holder never got the lock"
        time.sleep(0.05)
    second = subprocess.run(
        [sys.executable, "-c", HOLDER, log, lock, "second", "0"], capture_output=True, text=True, check=True
    )
    assert first.wait(timeout=20) == 0
    assert log.read_text().splitlines() == ["first in", "first out", "second in", "second out"]
    assert "wait for another process to finish the thing" in second.stdout


def test_an_uncontended_lock_says_nothing(tmp_path: Path) -> None:
    log, lock = tmp_path / "log", tmp_path / "thing.lock"
    alone = subprocess.run(
        [sys.executable, "-c", HOLDER, log, lock, "alone", "0"], capture_output=True, text=True, check=True
    )
    assert log.read_text().splitlines() == ["alone in", "alone out"] and "wait" not in alone.stdout
