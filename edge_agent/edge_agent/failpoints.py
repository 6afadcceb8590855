"""Failpoints: die at one named point, once, when a test arms it.

The fault suite (tests/e2e) must kill a process at an exact moment, which a kill from
outside hits only by luck:

- the agent after the broker acknowledged a round and before its spool recorded it (the
  next start resends the round), armed in the spool directory;
- the Spark driver after a batch's Kafka commit and before Spark's checkpoint commit,
  armed in the checkpoint directory (the Spark apps' bundle ships this module, as it
  ships the reading contract).

A failpoint is armed by creating `<directory>/failpoints/<name>`; the process removes it
(so it fires once) and SIGKILLs itself, or its whole process group (the driver's JVM and
Python alike, as `systemctl kill --signal=KILL` would). Unarmed, it costs a stat.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

BEFORE_SPOOL_COMMIT = "before-spool-commit"
AFTER_KAFKA_COMMIT = "after-kafka-commit"
log = logging.getLogger(__name__)


def crash_if_armed(directory: str, name: str, *, process_group: bool = False) -> None:
    try:
        (Path(directory) / "failpoints" / name).unlink()
    except FileNotFoundError:
        return
    target = "process group" if process_group else "process"
    log.warning("failpoint %s armed: SIGKILL to the %s", name, target)
    if process_group:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
