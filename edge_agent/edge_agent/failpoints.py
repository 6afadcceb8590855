"""Failpoints: die at one named point, once, when a test arms it.

The fault suite (tests/e2e) kills the agent at the worst moment of a drain: the broker
has acknowledged a round and the spool has not yet recorded it, so the next start
resends it. A kill from outside hits that moment only by luck. A failpoint is armed by
creating `<spool directory>/failpoints/<name>`; the agent removes it (it fires once) and
SIGKILLs itself. Unarmed, it costs a stat per round sent.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

BEFORE_SPOOL_COMMIT = "before-spool-commit"
log = logging.getLogger(__name__)


def crash_if_armed(spool_directory: str, name: str) -> None:
    try:
        (Path(spool_directory) / "failpoints" / name).unlink()
    except FileNotFoundError:
        return
    log.warning("failpoint %s armed: SIGKILL", name)
    os.kill(os.getpid(), signal.SIGKILL)
