#!/usr/bin/python
"""Declarative Kafka topics and ACLs, and the health gate of the rolling restart.

Runs on the controller (kafka-python, the admin client's mTLS identity) so no
JVM tool has to start on a Pi for each check. A thin module: each of its jobs is a module_utils
of the role (module_utils/kafka_*.py: acls, quotas, topics, records, scram, health, features,
rebalance).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.pikit.cluster.plugins.module_utils.kafka_acls import reconcile_acls, wait_applied
from ansible_collections.pikit.cluster.plugins.module_utils.kafka_client import connect
from ansible_collections.pikit.cluster.plugins.module_utils.kafka_features import (
    features_to_raise,
    finalized_features,
    raise_features,
)
from ansible_collections.pikit.cluster.plugins.module_utils.kafka_health import health_report, kafka_uuid
from ansible_collections.pikit.cluster.plugins.module_utils.kafka_quotas import reconcile_quotas
from ansible_collections.pikit.cluster.plugins.module_utils.kafka_rebalance import (
    balanced_assignment,
    rebalance,
    throttle,
)
from ansible_collections.pikit.cluster.plugins.module_utils.kafka_records import cut_offsets, delete_records
from ansible_collections.pikit.cluster.plugins.module_utils.kafka_scram import (
    reconcile_scram,
    scram_login_works,
)
from ansible_collections.pikit.cluster.plugins.module_utils.kafka_topics import end_offsets, reconcile_topics

DOCUMENTATION = r"""
module: kafka_admin
short_description: Reconcile Kafka topics and ACLs; report or wait for cluster health
description:
  - C(action=reconcile) creates missing topics, raises partition counts, sets the listed topic
    configs (incrementally), and reports drift it will not fix (replication factor, fewer partitions).
    A topic listed with C(state=absent) is deleted when it is in I(delete_topics_confirmed); an
    unconfirmed one fails the run, naming it, before any topic changes.
    It adds missing ACLs and, with I(remove_extra_acls), removes ACLs that are not listed; the ACLs of
    I(owned_principals) are exactly those listed, whatever I(remove_extra_acls) says (a device's
    allow is taken back and its deny removed when the kit revokes or restores it), and so are those
    of every principal that starts with one of I(owned_principal_prefixes) (a core's mirroring sites;
    a site taken out of the inventory loses its ACLs).
    It sets each listed user's client quota, I(quotas) (bytes per second that the user may produce to
    each broker), and removes the quota of an I(owned_principals) user it does not list; the quotas of
    other users are reported as drift.
    It creates the listed SCRAM-SHA-512 users and resets a user's password when a login with the
    listed one fails on I(sasl_bootstrap_servers); users it does not list are reported as drift.
  - C(action=health) reports under-replicated and offline partitions, registered brokers and the
    metadata quorum's voters, observers and voter lag; with I(wait_timeout) it waits until the cluster
    is healthy (with I(expect_voters), until the voters are those).
    It also reports each broker's log directories (size, free, share used) and warns about one
    fuller than I(disk_warn_share); a full disk warns, it does not fail the gate.
  - C(action=features) reports the cluster's finalized feature levels, and raises each one listed
    in I(feature_levels) that is below its listed level (an upgrade's finalize); it never lowers one.
  - C(action=rebalance) moves every replica off the brokers not in I(serving_brokers), then from the
    fullest broker to the emptiest until their replica counts differ by at most one, each partition
    keeping its replication factor, under a replication throttle of I(throttle_bytes) per second
    (0 for none) that is removed afterwards; it waits up to I(wait_timeout) for the moves.
  - C(action=delete_records) deletes the records of I(topic) before I(before_offset) in every
    partition, or before the first record at or after I(before_time_ms); it moves each partition's
    log start offset, never past its end.
  - C(action=throttle) sets the replication throttle of I(throttle_bytes) per second on the leaders
    in I(serving_brokers), for every topic's replicas that are not in sync (0 removes it); a broker
    whose disk was replaced rebuilds its replicas under it, and in-sync followers never wait on it.
options:
  action:
    type: str
    choices: [reconcile, health, features, rebalance, throttle, end_offsets, delete_records]
    default: reconcile
    description: What to do.
  bootstrap_servers: {type: list, elements: str, required: true, description: host:port of brokers.}
  security_protocol: {type: str, default: SSL, choices: [SSL, PLAINTEXT], description: Client protocol.}
  ssl_cafile: {type: path, description: CA certificate (PEM).}
  ssl_certfile: {type: path, description: Client key and certificate (one PEM bundle).}
  topics: {type: list, elements: dict, default: [], description: "Desired topics; C(state=absent) to delete."}
  delete_topics_confirmed:
    type: list
    elements: str
    default: []
    description: The topics marked absent whose deletion the operator confirmed.
  acls: {type: list, elements: dict, default: [], description: Desired ACLs.}
  remove_extra_acls: {type: bool, default: false, description: Delete ACLs that are not listed.}
  owned_principals:
    type: list
    elements: str
    default: []
    description: Principals whose ACLs and quotas the kit owns whole (its devices); the unlisted go.
  owned_principal_prefixes:
    type: list
    elements: str
    default: []
    description: Principals starting with one of these have their ACLs owned whole too (a core's sites).
  quotas:
    type: dict
    default: {}
    description: "Producer quotas, {user name: bytes per second per broker} (a principal without `User:`)."
  expect_brokers: {type: int, default: 0, description: Health needs at least this many brokers.}
  max_quorum_lag: {type: int, default: 100, description: Largest voter lag (records) counted healthy.}
  expect_voters: {type: list, elements: int, default: [], description: Health needs exactly these voters.}
  quorum_only:
    type: bool
    default: false
    description: Health is the quorum's alone (a voter change while a broker rebuilds its replicas).
  wait_timeout: {type: int, default: 0, description: Seconds to wait for health (0 reports once).}
  disk_warn_share: {type: float, default: 0.85, description: Warn about a log directory fuller than this.}
  scram_users: {type: list, elements: dict, default: [], description: "SCRAM users, {name, password}."}
  scram_iterations: {type: int, default: 8192, description: SCRAM-SHA-512 iterations.}
  sasl_bootstrap_servers: {type: list, elements: str, default: [], description: The SASL_SSL listeners.}
  feature_levels: {type: dict, default: {}, description: "Feature levels to raise to, {name: level}."}
  serving_brokers: {type: list, elements: int, default: [], description: Ids of the brokers to hold replicas.}
  throttle_bytes: {type: int, default: 0, description: Replication throttle while partitions move (bytes/s).}
  topic: {type: str, default: "", description: The topic of action=end_offsets or action=delete_records.}
  before_offset:
    type: int
    default: -1
    description: "action=delete_records: each partition's records before this offset."
  before_time_ms:
    type: int
    default: -1
    description: "action=delete_records: the records older than this time (epoch milliseconds)."
author: pikit
"""

RETURN = r"""
changes: {description: What was changed, type: list, returned: always}
drift: {description: Differences left alone, type: list, returned: always}
health: {description: The health report, type: dict, returned: when action=health}
features: {description: "Finalized levels after, {name: level}", type: dict, returned: when action=features}
features_before: {description: Finalized levels before the run, type: dict, returned: when action=features}
propagated_s: {description: Seconds until every broker applied the ACLs, type: float, returned: when waited}
end_offsets: {description: "{partition: end offset}", type: dict, returned: when action=end_offsets}
"""

try:
    import kafka  # noqa: F401

    HAS_KAFKA = True
except ImportError:  # reported by main() through fail_json
    HAS_KAFKA = False

__all__ = [
    "ARGUMENT_SPEC",
    "balanced_assignment",
    "connect",
    "cut_offsets",
    "delete_records",
    "end_offsets",
    "features_to_raise",
    "finalized_features",
    "health_report",
    "kafka_uuid",
    "main",
    "params_with_defaults",
    "raise_features",
    "rebalance",
    "reconcile_acls",
    "reconcile_quotas",
    "reconcile_scram",
    "reconcile_topics",
    "run",
    "scram_login_works",
    "throttle",
    "wait_applied",
]


def run(params: dict[str, Any], check: bool) -> dict[str, Any]:
    if params["action"] == "health":
        deadline = time.monotonic() + params["wait_timeout"]
        while True:
            try:
                admin = connect(params)
                try:
                    report = health_report(
                        admin,
                        params["expect_brokers"],
                        params["max_quorum_lag"],
                        params["disk_warn_share"],
                        params["expect_voters"],
                        params["quorum_only"],
                    )
                finally:
                    admin.close()
            except Exception as exc:  # a broker that is still starting answers with errors
                report = {"healthy": False, "error": f"{type(exc).__name__}: {exc}"}
            if report["healthy"] or time.monotonic() >= deadline:
                return {
                    "changed": False,
                    "health": report,
                    "failed": params["wait_timeout"] > 0 and not report["healthy"],
                }
            time.sleep(2)
    if params["action"] == "end_offsets":
        return {"changed": False, "end_offsets": end_offsets(params)}
    if params["action"] == "delete_records":
        deleted: dict[str, Any] = delete_records(params, check)
        return deleted
    if params["action"] == "rebalance":
        admin = connect(params)
        try:
            moved: dict[str, Any] = rebalance(
                admin, params["serving_brokers"], params["throttle_bytes"], params["wait_timeout"], check
            )
            return moved
        finally:
            admin.close()
    if params["action"] == "throttle":
        if check:
            return {"changed": True}
        admin = connect(params)
        try:
            topics = sorted(t["name"] for t in admin.describe_topics())
            throttle(admin, params["serving_brokers"], topics, params["throttle_bytes"] or None)
        finally:
            admin.close()
        return {"changed": True, "throttled_topics": len(topics) if params["throttle_bytes"] else 0}
    if params["action"] == "features":
        admin = connect(params)
        try:
            raised: dict[str, Any] = raise_features(admin, params["feature_levels"], check)
            return raised
        finally:
            admin.close()
    return _retrying(lambda: _reconcile(params, check))


# A reconcile is declarative, so one that met a broker too slow to answer (a request timed out
# under load: molecule kafka/default's converge failed so, 2026-12-01) is run again whole, after
# a pause. An error that is not retriable (a refused config, an authorization) fails at once.
RECONCILE_ATTEMPTS = 3
RECONCILE_PAUSE_S = 5.0


def _retrying(reconcile: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`reconcile()`, again while it meets a retriable error, up to RECONCILE_ATTEMPTS times. The
    result is the last attempt's: changes an attempt cut short had made are not listed again."""
    attempt = 1
    while True:
        try:
            result = reconcile()
        except Exception as exc:
            if not getattr(exc, "retriable", False) or attempt >= RECONCILE_ATTEMPTS:
                raise
            time.sleep(RECONCILE_PAUSE_S * attempt)
            attempt += 1
            continue
        return {**result, "attempts": attempt} if attempt > 1 else result


def _reconcile(params: dict[str, Any], check: bool) -> dict[str, Any]:
    admin = connect(params)
    try:
        confirmed = frozenset(params["delete_topics_confirmed"])
        changes, drift = reconcile_topics(admin, params["topics"], check, confirmed)
        acl_changes, acl_drift = reconcile_acls(
            admin,
            params["acls"],
            params["remove_extra_acls"],
            check,
            frozenset(params["owned_principals"]),
            tuple(params["owned_principal_prefixes"]),
        )
        scram_changes, scram_drift = reconcile_scram(admin, params, check)
        quota_changes, quota_drift = reconcile_quotas(
            admin, params["quotas"], frozenset(params["owned_principals"]), check
        )
        scram_changes += quota_changes
        scram_drift += quota_drift
        waited = {}
        if acl_changes and params["wait_timeout"] and not check:
            waited["propagated_s"] = wait_applied(admin, params["wait_timeout"])
    finally:
        admin.close()
    return {
        "changed": bool(changes or acl_changes or scram_changes),
        "changes": changes + acl_changes + scram_changes,
        "drift": drift + acl_drift + scram_drift,
        **waited,
    }


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "action": {
        "type": "str",
        "choices": [
            "reconcile",
            "health",
            "features",
            "rebalance",
            "throttle",
            "end_offsets",
            "delete_records",
        ],
        "default": "reconcile",
    },
    "bootstrap_servers": {"type": "list", "elements": "str", "required": True},
    "security_protocol": {"type": "str", "default": "SSL", "choices": ["SSL", "PLAINTEXT"]},
    "ssl_cafile": {"type": "path"},
    "ssl_certfile": {"type": "path"},
    "topics": {"type": "list", "elements": "dict", "default": []},
    "delete_topics_confirmed": {"type": "list", "elements": "str", "default": []},
    "acls": {"type": "list", "elements": "dict", "default": []},
    "remove_extra_acls": {"type": "bool", "default": False},
    "owned_principals": {"type": "list", "elements": "str", "default": []},
    "owned_principal_prefixes": {"type": "list", "elements": "str", "default": []},
    "quotas": {"type": "dict", "default": {}},
    "expect_brokers": {"type": "int", "default": 0},
    "max_quorum_lag": {"type": "int", "default": 100},
    "quorum_only": {"type": "bool", "default": False},
    "expect_voters": {"type": "list", "elements": "int", "default": []},
    "wait_timeout": {"type": "int", "default": 0},
    "disk_warn_share": {"type": "float", "default": 0.85},
    "scram_users": {"type": "list", "elements": "dict", "default": [], "no_log": True},
    "scram_iterations": {"type": "int", "default": 8192},
    "sasl_bootstrap_servers": {"type": "list", "elements": "str", "default": []},
    "feature_levels": {"type": "dict", "default": {}},
    "serving_brokers": {"type": "list", "elements": "int", "default": []},
    "throttle_bytes": {"type": "int", "default": 0},
    "topic": {"type": "str", "default": ""},
    "before_offset": {"type": "int", "default": -1},
    "before_time_ms": {"type": "int", "default": -1},
}


def params_with_defaults(**given: Any) -> dict[str, Any]:
    """The module's parameters as Ansible would pass them: `given` over ARGUMENT_SPEC's defaults.
    The controller's tools and the tests call run() with these, so no caller misses a parameter."""
    return {name: copy.deepcopy(spec.get("default")) for name, spec in ARGUMENT_SPEC.items()} | given


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not HAS_KAFKA:
        module.fail_json(msg="kafka_admin needs kafka-python on the controller (requirements.txt)")
    try:
        result = run(module.params, module.check_mode)
    except Exception as exc:
        module.fail_json(msg=f"{type(exc).__name__}: {exc}")
    for warning in result.get("health", {}).get("disk_warnings", []):
        module.warn(warning)
    if result.pop("failed", False):
        module.fail_json(**{"msg": "Kafka cluster not healthy in time", **result})
    module.exit_json(**result)


if __name__ == "__main__":
    main()
