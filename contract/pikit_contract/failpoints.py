"""Failpoints: die, or hold still, at one named point, once, when a test arms it.

The fault suite (tests/e2e) must hit a process at an exact moment, which a kill from
outside hits only by luck:

- the agent after the broker acknowledged a round and before its spool recorded it (the
  next start resends the round), armed in the spool directory;
- the Spark driver after a batch's Kafka commit and before Spark's checkpoint commit,
  armed in the checkpoint directory (the Spark apps' bundle ships this module, as it
  ships the reading contract);
- the driver's transactional sink at each step of a batch's transaction (after the sends;
  after the offsets joined it, which is before the commit; after the commit), also in the
  checkpoint directory: held there, a transaction is open while a test takes the brokers away.

A failpoint is armed by creating `<directory>/failpoints/<name>`; the process removes it
(so it fires once). An empty file means SIGKILL, of the process or of its whole process
group (the driver's JVM and Python alike, as `systemctl kill --signal=KILL` would). A file
that reads `hold <seconds>` makes the process wait there that long and go on. Unarmed, it
costs a stat.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

BEFORE_SPOOL_COMMIT = "before-spool-commit"
AFTER_KAFKA_COMMIT = "after-kafka-commit"
SINK_AFTER_SENDS = "sink-after-sends"
SINK_BEFORE_COMMIT = "sink-before-commit"
SINK_AFTER_COMMIT = "sink-after-commit"
SINK_POINTS = (SINK_AFTER_SENDS, SINK_BEFORE_COMMIT, SINK_AFTER_COMMIT)
log = logging.getLogger(__name__)


def fire_if_armed(directory: str, name: str, *, process_group: bool = False) -> None:
    flag = Path(directory) / "failpoints" / name
    try:
        action = flag.read_text().split()
        flag.unlink()
    except FileNotFoundError:
        return
    if action[:1] == ["hold"]:
        seconds = float(action[1])
        log.warning("failpoint %s armed: holding for %.0f s", name, seconds)
        time.sleep(seconds)
        return
    target = "process group" if process_group else "process"
    log.warning("failpoint %s armed: SIGKILL to the %s", name, target)
    if process_group:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
