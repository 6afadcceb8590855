"""An armed failpoint kills the driver's whole process group with SIGKILL, once."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pikit_contract.failpoints import AFTER_KAFKA_COMMIT

# A stand-in driver: a child (the JVM's place) and the caller share a process group.
DRIVER = textwrap.dedent("""
    import subprocess, sys
    from pikit_contract.failpoints import fire_if_armed
    child = subprocess.Popen(["sleep", "60"])
    print(child.pid, flush=True)
    fire_if_armed(sys.argv[1], sys.argv[2], process_group=True)
    child.kill()
""")


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    # A session of its own: the failpoint kills the whole process group.
    return subprocess.run(
        argv, capture_output=True, text=True, start_new_session=True, timeout=60, check=False
    )


def gone(pid: int) -> bool:
    try:
        return "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return True


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    # SIGKILL is delivered at once but acted on when the process is next scheduled.
    deadline = time.monotonic() + timeout
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_an_armed_failpoint_kills_the_process_group_once(tmp_path: Path) -> None:
    flag = tmp_path / "failpoints" / AFTER_KAFKA_COMMIT
    flag.parent.mkdir()
    flag.touch()
    argv = [sys.executable, "-c", DRIVER, str(tmp_path), AFTER_KAFKA_COMMIT]
    proc = run(argv)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    child = int(proc.stdout.split()[0])
    assert wait_gone(child), "the child in the process group was killed too"
    assert not flag.exists()
    proc = run(argv)
    assert proc.returncode == 0, "it fired once"
