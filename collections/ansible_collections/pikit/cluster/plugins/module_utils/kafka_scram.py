"""SCRAM-SHA-512 users: created, and a password reset when a login with the listed one fails."""

from __future__ import annotations

import contextlib
from typing import Any

# Without kafka-python the module fails, naming it (modules/kafka_admin.py: HAS_KAFKA).
with contextlib.suppress(ImportError):
    from kafka.admin import KafkaAdminClient, ScramMechanism, UserScramCredentialUpsertion
    from kafka.errors import KafkaError


def scram_login_works(params: dict[str, Any], user: dict[str, str]) -> bool:
    """A SCRAM login with this password succeeds: the password the cluster holds is this one."""
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=params["sasl_bootstrap_servers"],
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username=user["name"],
            sasl_plain_password=user["password"],
            ssl_cafile=params["ssl_cafile"],
            request_timeout_ms=10000,
            bootstrap_timeout_ms=10000,
        )
    except KafkaError:  # a refused login surfaces as a bootstrap timeout
        return False
    admin.close()
    return True


def reconcile_scram(admin: Any, params: dict[str, Any], check: bool) -> tuple[list[str], list[str]]:
    users, iterations = params["scram_users"], params["scram_iterations"]
    known = admin.describe_user_scram_credentials() if users or params["sasl_bootstrap_servers"] else {}
    changes, upserts = [], []
    for user in users:
        infos = (known.get(user["name"]) or {}).get("credential_infos") or []
        current = any(
            i["mechanism"] == ScramMechanism.SCRAM_SHA_512 and i["iterations"] == iterations for i in infos
        )
        if current and scram_login_works(params, user):
            continue
        changes.append(f"SCRAM user {user['name']}: {'password reset' if infos else 'created'}")
        upserts.append(
            UserScramCredentialUpsertion(
                user["name"], ScramMechanism.SCRAM_SHA_512, user["password"], iterations
            )
        )
    if upserts and not check:
        failed = {name: error for name, error in admin.alter_user_scram_credentials(upserts).items() if error}
        if failed:
            raise RuntimeError(f"SCRAM credentials not stored: {failed}")
    listed = {user["name"] for user in users}
    drift = [
        f"SCRAM user {name} is not in kafka_scram_users (left alone)" for name in sorted(set(known) - listed)
    ]
    return changes, drift
