"""Waiting for a lab, a broker or an agent to reach a state: the one polling helper of the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


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
    restarting); the last one is named when time runs out.
    """
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
