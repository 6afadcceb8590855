"""The tests' one polling helper: an idle lab (make test-ops' molecule scenarios) waits longer."""

from __future__ import annotations

import pytest
from pikit_testkit.polling import wait_for


@pytest.mark.parametrize(("idle", "waited"), [(None, "0s"), ("1", "1s")])
def test_a_wait_stretches_on_an_idle_lab_only(
    monkeypatch: pytest.MonkeyPatch, idle: str | None, waited: str
) -> None:
    if idle is None:
        monkeypatch.delenv("PIKIT_LAB_IDLE", raising=False)
    else:
        monkeypatch.setenv("PIKIT_LAB_IDLE", idle)
    with pytest.raises(AssertionError, match=f"timed out after {waited} waiting for nothing"):
        wait_for("nothing", lambda: None, timeout=0.3, every=0.05)


def test_a_wait_returns_what_the_check_found() -> None:
    calls = iter([None, 0, "here"])
    assert wait_for("a value", lambda: next(calls), timeout=5, every=0.01) == "here"
