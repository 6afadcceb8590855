"""A process tells systemd it is alive while its work moves: systemd's watchdog for what no
bound on a call catches. Shared by the Spark drivers (which the apps' bundle ships it to) and
the edge agent.

The unit has `WatchdogSec=` and, for a driver, `NotifyAccess=all`: the driver's Python process
is a child of spark-submit's JVM, not the unit's main process. A thread here sends `WATCHDOG=1`
to `$NOTIFY_SOCKET` for as long as the work showed life within `stall_after` seconds: for a
driver, some query started, made a micro-batch or found nothing to read; for the agent, its
send loop turned. A process that is frozen whole sends nothing; one whose work hangs (a call
without a bound, a deadlock) stops sending once the stall passes. Either way systemd kills it
within `WatchdogSec` and starts it again (`Restart=`): the driver's exactly-once sink makes the
replayed batch safe, and the agent's spool keeps every reading it had not sent.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

LOG = logging.getLogger("pikit.watchdog")


def notify(message: str, address: str | None = None) -> bool:
    """Send `message` to systemd's notification socket; False when there is none."""
    address = address if address is not None else os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    # An address starting with "@" is in the abstract namespace.
    target = "\0" + address[1:] if address.startswith("@") else address
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(message.encode(), target)
    return True


def alive(now: float, last_sign: float, stall_after: float) -> bool:
    """Whether the work showed life recently enough to tell systemd so."""
    return now - last_sign < stall_after


class Watchdog:
    """Pets systemd's watchdog every `interval` seconds while `last_sign()` is recent."""

    def __init__(
        self,
        last_sign: Callable[[], float],
        stall_after: float,
        interval: float,
        address: str | None = None,
    ) -> None:
        self.last_sign = last_sign
        self.stall_after = stall_after
        self.interval = interval
        self.address = address
        self.stalled = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pikit-watchdog", daemon=True)

    @classmethod
    def for_unit(cls, last_sign: Callable[[], float], stall_after: float) -> Watchdog | None:
        """The watchdog of a unit that asks for one (`WATCHDOG_USEC`), else None."""
        usec = int(os.environ.get("WATCHDOG_USEC", "0") or 0)
        if not usec or not os.environ.get("NOTIFY_SOCKET") or stall_after <= 0:
            return None
        return cls(last_sign, stall_after, interval=max(1.0, usec / 1e6 / 3))

    def start(self) -> Watchdog:
        LOG.info(
            "watchdog: telling systemd every %.0fs while the work moved within %.0fs",
            self.interval,
            self.stall_after,
        )
        self.beat()  # at once: systemd counts from the unit's start
        self._thread.start()
        return self

    def beat(self) -> bool:
        """One check: pet the watchdog when the work is alive. Whether it did."""
        now, sign = time.time(), self.last_sign()
        if alive(now, sign, self.stall_after):
            self.stalled = False
            return notify("WATCHDOG=1", self.address)
        if not self.stalled:
            LOG.error(
                "watchdog: no sign of work for %.0fs (more than %.0fs): systemd will restart this process",
                now - sign,
                self.stall_after,
            )
            self.stalled = True
        return False

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except OSError as exc:  # a missing socket must not kill the process; systemd will
                LOG.warning("watchdog: %s", exc)

    def stop(self) -> None:
        self._stop.set()
