"""A pytest plugin (pyproject's addopts): on an idle lab (PIKIT_LAB_IDLE=1), each test's timeout
stretches as its waits do (`polling.stretch`). make test-ops runs its molecule scenarios idle,
beside the end-to-end suite's bounded faults; their tests assert no recovery time, so the
timeout that keeps a hung test from holding CI is how long to wait, not a bound to prove."""

from __future__ import annotations

import pytest

from pikit_testkit.polling import stretch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    factor = stretch()
    if factor == 1.0:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        given = (
            marker.kwargs.get("timeout", marker.args[0] if marker.args else default) if marker else default
        )
        if given:
            # Prepended: pytest-timeout reads the closest mark, which is now this one.
            item.add_marker(pytest.mark.timeout(float(given) * factor), append=False)
