"""Filters of the rolling_restart role: which hosts restart, and why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _is_true(value: Any) -> bool:
    if isinstance(value, Mapping):  # a registered result
        return bool(value.get("changed"))
    if isinstance(value, str):  # a fact templated to text
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def rolling_restart_reasons(changes: Mapping[str, Any], pending: list[str] | None = None) -> list[str]:
    """The reasons still pending from an earlier run, then the names of what changed now, once each."""
    reasons = list(pending or [])
    reasons += [name for name, value in changes.items() if _is_true(value) and name not in reasons]
    return reasons


def rolling_restart_plan(order: list[str], hostvars: Mapping[str, Any], service: str) -> list[dict[str, Any]]:
    """The hosts of `order` with a pending restart of `service` (their `rolling_restart_pending`
    fact, set by the role's `mark` tasks), in that order, each with its units and reasons."""
    plan = []
    for host in order:
        facts = hostvars.get(host) or {}
        pending = (facts.get("rolling_restart_pending") or {}).get(service) or {}
        if pending.get("reasons"):
            plan.append({"host": host, "units": list(pending["units"]), "reasons": list(pending["reasons"])})
    return plan


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "rolling_restart_reasons": rolling_restart_reasons,
            "rolling_restart_plan": rolling_restart_plan,
        }
