"""kafka_admin's reconcile runs again after a retriable error (a broker too slow to answer under
load), and fails at once on any other."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.pikit.cluster.plugins.modules import kafka_admin
from kafka.errors import RequestTimedOutError, TopicAuthorizationFailedError


def _flaky(errors: list[Exception]) -> Any:
    calls: list[int] = []

    def reconcile(params: dict[str, Any], check: bool) -> dict[str, Any]:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return {"changed": False, "changes": [], "drift": []}

    reconcile.calls = calls  # type: ignore[attr-defined]
    return reconcile


def test_a_timed_out_reconcile_runs_again_and_says_how_many_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    reconcile = _flaky([RequestTimedOutError("slow"), RequestTimedOutError("slow")])
    monkeypatch.setattr(kafka_admin, "_reconcile", reconcile)
    monkeypatch.setattr(kafka_admin, "RECONCILE_PAUSE_S", 0)
    result = kafka_admin.run(kafka_admin.params_with_defaults(bootstrap_servers=["k:9093"]), False)
    assert result["attempts"] == 3 and len(reconcile.calls) == 3 and result["changed"] is False


def test_a_refusal_fails_at_once_and_a_third_timeout_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_admin, "RECONCILE_PAUSE_S", 0)
    params = kafka_admin.params_with_defaults(bootstrap_servers=["k:9093"])
    refused = _flaky([TopicAuthorizationFailedError("no")])
    monkeypatch.setattr(kafka_admin, "_reconcile", refused)
    with pytest.raises(TopicAuthorizationFailedError):
        kafka_admin.run(params, False)
    assert len(refused.calls) == 1
    slow = _flaky([RequestTimedOutError("slow")] * 3)
    monkeypatch.setattr(kafka_admin, "_reconcile", slow)
    with pytest.raises(RequestTimedOutError):
        kafka_admin.run(params, False)
    assert len(slow.calls) == kafka_admin.RECONCILE_ATTEMPTS
