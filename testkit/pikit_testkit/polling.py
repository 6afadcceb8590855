"""Waiting for a lab, a broker or an agent to reach a state: the one polling helper of the tests."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

# make test-ops runs its molecule scenarios' nodes idle (PIKIT_LAB_IDLE=1): they get only the CPU
# the end-to-end lab leaves. Those scenarios assert no recovery time, so their waits stretch as the
# roles' health gates do (inventory/lab/group_vars/all.yml, lab_idle); every other lab's do not.
IDLE_STRETCH = 4.0


def stretch() -> float:
    """How many times longer than asked a wait lasts on this lab."""
    return IDLE_STRETCH if os.environ.get("PIKIT_LAB_IDLE") == "1" else 1.0


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout: float = 240.0,
    every: float = 3.0,
    *,
    tolerate: tuple[type[Exception], ...] = (),
) -> Any:
    """Call `check` every `every` seconds until it returns something truthy, and return that.

    Exceptions of the `tolerate` types count as "not yet" (a broker or an app that is
    restarting); the last one is named when time runs out. An idle lab waits `stretch()` times
    as long.
    """
    timeout *= stretch()
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            result = check()
        except tolerate as exc:
            last, result = exc, None
        if result:
            return result
        if time.monotonic() >= deadline:
            seen = f" (last error: {last!r})" if last else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{seen}")
        time.sleep(every)
