"""Failpoints: die at one named point, once, when a test arms it.

The fault suite (tests/e2e) must kill the driver at an exact moment, such as between a
batch's Kafka commit and Spark's checkpoint commit, which a kill from outside hits only
by luck. A failpoint is armed by creating the file `<checkpoint dir>/failpoints/<name>`;
the driver removes it (so it fires once) and SIGKILLs its process group, the driver's
JVM and Python alike, as `systemctl kill --signal=KILL` would. Unarmed, it costs a stat.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

from pikit_spark.common import LOG

AFTER_KAFKA_COMMIT = "after-kafka-commit"


def crash_if_armed(checkpoint_dir: str, name: str) -> None:
    try:
        (Path(checkpoint_dir) / "failpoints" / name).unlink()
    except FileNotFoundError:
        return
    LOG.warning("failpoint %s armed: killing the driver (SIGKILL to its process group)", name)
    for handler in logging.getLogger().handlers + LOG.handlers:
        handler.flush()
    os.killpg(os.getpgid(0), signal.SIGKILL)
