"""Client quotas: each user's producer byte rate, reconciled (kafka-python has no quota API)."""

from __future__ import annotations

import contextlib
from typing import Any

# Without kafka-python the module fails, naming it (modules/kafka_admin.py: HAS_KAFKA).
with contextlib.suppress(ImportError):
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest


PRODUCE_QUOTA = "producer_byte_rate"


def _quota_call(admin: Any, request: Any) -> Any:
    """Send one request through the admin client's connection manager (kafka-python has no quota
    API of its own), and raise the broker's error."""

    async def call() -> Any:
        return await admin._manager.send(request)

    response = admin._manager.run(call)
    for entry in [response, *(getattr(response, "entries", None) or [])]:
        if getattr(entry, "error_code", 0):
            raise RuntimeError(f"{type(request).__name__}: {entry.error_message or entry.error_code}")
    return response


def user_quotas(admin: Any) -> dict[str, float]:
    """Every user's own producer quota (entities of a user alone, not of a user with a client id)."""
    component = DescribeClientQuotasRequest.ComponentData(entity_type="user", match_type=2, match=None)
    response = _quota_call(admin, DescribeClientQuotasRequest(components=[component], strict=True))
    found = {}
    for entry in response.entries or []:
        [entity] = entry.entity
        rate = next((v.value for v in entry.values if v.key == PRODUCE_QUOTA), None)
        if entity.entity_name is not None and rate is not None:
            found[entity.entity_name] = rate
    return found


def reconcile_quotas(
    admin: Any, quotas: dict[str, float], owned: frozenset[str], check: bool
) -> tuple[list[str], list[str]]:
    existing = user_quotas(admin)
    users = {principal.removeprefix("User:") for principal in owned}
    changes: list[str] = []
    drift: list[str] = []
    ops: list[tuple[str, float | None]] = []
    for user, rate in sorted(quotas.items()):
        if existing.get(user) != float(rate):
            changes.append(f"quota of {user}: {existing.get(user)} -> {float(rate):g} bytes/s")
            ops.append((user, float(rate)))
    for user in sorted(set(existing) - set(quotas)):
        if user in users:
            changes.append(f"quota of {user}: {existing[user]:g} bytes/s removed")
            ops.append((user, None))
        else:
            drift.append(f"quota of {user} ({existing[user]:g} bytes/s) is not the kit's (left alone)")
    if ops and not check:
        entry, entity, op = (
            AlterClientQuotasRequest.EntryData,
            AlterClientQuotasRequest.EntryData.EntityData,
            AlterClientQuotasRequest.EntryData.OpData,
        )
        entries = [
            entry(
                entity=[entity(entity_type="user", entity_name=user)],
                ops=[op(key=PRODUCE_QUOTA, value=rate or 0.0, remove=rate is None)],
            )
            for user, rate in ops
        ]
        _quota_call(admin, AlterClientQuotasRequest(entries=entries, validate_only=False))
    return changes, drift
