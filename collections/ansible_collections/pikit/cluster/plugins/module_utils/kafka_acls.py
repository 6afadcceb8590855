"""ACLs: the inventory's entries as bindings, reconciled; and the wait until every broker applied them."""

from __future__ import annotations

import contextlib
import time
from typing import Any

# Without kafka-python the module fails, naming it (modules/kafka_admin.py: HAS_KAFKA).
with contextlib.suppress(ImportError):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )


def acl_key(
    principal: str, resource_type: str, name: str, pattern: str, op: str, perm: str, host: str
) -> tuple[str, ...]:
    return (principal, resource_type.upper(), name, pattern.upper(), op.upper(), perm.upper(), host)


OPERATIONS = {
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
}


def desired_acl_keys(acls: list[dict[str, Any]]) -> set[tuple[str, ...]]:
    """Expand each entry's `operations` list into one key per ACL binding."""
    keys = set()
    for entry in acls:
        unknown = sorted({op.upper() for op in entry["operations"]} - OPERATIONS)
        if unknown:
            raise ValueError(
                f"kafka_acls entry for {entry['principal']}: unknown operations {unknown}; "
                f"use {sorted(o.lower() for o in OPERATIONS)}"
            )
        for op in entry["operations"]:
            keys.add(
                acl_key(
                    entry["principal"],
                    entry["resource_type"],
                    entry["resource_name"],
                    entry.get("pattern_type", "literal"),
                    op,
                    entry.get("permission", "allow"),
                    entry.get("host", "*"),
                )
            )
    return keys


def _acl_from_key(key: tuple[str, ...]) -> Any:
    principal, rtype, name, pattern, op, perm, host = key
    return ACL(
        principal=principal,
        host=host,
        operation=ACLOperation[op],
        permission_type=ACLPermissionType[perm],
        resource_pattern=ResourcePattern(ResourceType[rtype], name, ACLResourcePatternType[pattern]),
    )


def _key_from_acl(acl: Any) -> tuple[str, ...]:
    rp = acl.resource_pattern
    return acl_key(
        acl.principal,
        ResourceType(rp.resource_type).name,
        rp.resource_name,
        ACLResourcePatternType(rp.pattern_type).name,
        ACLOperation(acl.operation).name,
        ACLPermissionType(acl.permission_type).name,
        acl.host,
    )


def _all_acls_filter() -> Any:
    return ACLFilter(
        principal=None,
        host=None,
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
    )


def reconcile_acls(
    admin: Any,
    acls: list[dict[str, Any]],
    remove_extra: bool,
    check: bool,
    owned: frozenset[str] = frozenset(),
    owned_prefixes: tuple[str, ...] = (),
) -> tuple[list[str], list[str]]:
    changes: list[str] = []
    drift: list[str] = []
    existing = {_key_from_acl(a) for a in admin.describe_acls(_all_acls_filter())[0]}
    wanted = desired_acl_keys(acls)
    missing = sorted(wanted - existing)
    extra = sorted(existing - wanted)
    if missing:
        changes += [f"add ACL {k}" for k in missing]
        if not check:
            result = admin.create_acls([_acl_from_key(k) for k in missing])
            if result["failed"]:
                raise RuntimeError(f"creating ACLs failed: {result['failed']}")
    for key in extra:
        if not (remove_extra or key[0] in owned or key[0].startswith(owned_prefixes)):
            drift.append(f"ACL not in the inventory (kept; set kafka_acls_remove_extra): {key}")
            continue
        changes.append(f"remove ACL {key}")
        if not check:
            principal, rtype, name, pattern, op, perm, host = key
            admin.delete_acls(
                [
                    ACLFilter(
                        principal=principal,
                        host=host,
                        operation=ACLOperation[op],
                        permission_type=ACLPermissionType[perm],
                        resource_pattern=ResourcePatternFilter(
                            ResourceType[rtype], name, ACLResourcePatternType[pattern]
                        ),
                    )
                ]
            )
    return changes, drift


def wait_applied(admin: Any, timeout: float) -> float:
    """Seconds until every voter and observer (each broker) of the metadata quorum has the log up
    to the high watermark seen now, that is every change made before this call."""
    started = time.monotonic()
    target = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]["high_watermark"]
    while True:
        quorum = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
        behind = sorted(
            r["replica_id"]
            for r in quorum["current_voters"] + quorum.get("observers", [])
            if r["log_end_offset"] < target
        )
        if not behind:
            return round(time.monotonic() - started, 2)
        if time.monotonic() - started >= timeout:
            raise RuntimeError(
                f"nodes {behind} did not apply the metadata log up to {target} within {timeout:.0f}s"
            )
        time.sleep(0.5)
