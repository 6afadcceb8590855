#!/usr/bin/python
"""Declarative Kafka topics and ACLs, and the health gate of the rolling restart.

Runs on the controller (kafka-python, the admin client's mTLS identity) so no
JVM tool has to start on a Pi for each check.
"""

from __future__ import annotations

import base64
import copy
import time
import uuid
from typing import Any

DOCUMENTATION = r"""
module: kafka_admin
short_description: Reconcile Kafka topics and ACLs; report or wait for cluster health
description:
  - C(action=reconcile) creates missing topics, raises partition counts, sets the listed topic
    configs (incrementally), and reports drift it will not fix (replication factor, fewer partitions).
    It adds missing ACLs and, with I(remove_extra_acls), removes ACLs that are not listed; the ACLs of
    I(owned_principals) are exactly those listed, whatever I(remove_extra_acls) says (a device's
    allow is taken back and its deny removed when the kit revokes or restores it).
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
  - C(action=throttle) sets the replication throttle of I(throttle_bytes) per second on the leaders
    in I(serving_brokers), for every topic's replicas that are not in sync (0 removes it): a broker
    whose disk was replaced rebuilds its replicas under it, and in-sync followers never wait on it.
options:
  action:
    type: str
    choices: [reconcile, health, features, rebalance, throttle, end_offsets]
    default: reconcile
    description: What to do.
  bootstrap_servers: {type: list, elements: str, required: true, description: host:port of brokers.}
  security_protocol: {type: str, default: SSL, choices: [SSL, PLAINTEXT], description: Client protocol.}
  ssl_cafile: {type: path, description: CA certificate (PEM).}
  ssl_certfile: {type: path, description: Client key and certificate (one PEM bundle).}
  topics: {type: list, elements: dict, default: [], description: Desired topics.}
  acls: {type: list, elements: dict, default: [], description: Desired ACLs.}
  remove_extra_acls: {type: bool, default: false, description: Delete ACLs that are not listed.}
  owned_principals:
    type: list
    elements: str
    default: []
    description: Principals whose ACLs and quotas the kit owns whole (its devices); the unlisted go.
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
  topic: {type: str, default: "", description: The topic of action=end_offsets.}
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
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewPartitions,
        NewTopic,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    from kafka.errors import KafkaError
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

    HAS_KAFKA = True
except ImportError:  # reported by main() through fail_json
    HAS_KAFKA = False


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
        if not (remove_extra or key[0] in owned):
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


def end_offsets(params: dict[str, Any]) -> dict[str, int]:
    consumer = KafkaConsumer(**_client_options(params))
    try:
        topic = params["topic"]
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        if not parts:
            raise RuntimeError(f"topic {params['topic']} has no partitions (does it exist?)")
        return {str(tp.partition): offset for tp, offset in sorted(consumer.end_offsets(parts).items())}
    finally:
        consumer.close()


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


def reconcile_topics(admin: Any, topics: list[dict[str, Any]], check: bool) -> tuple[list[str], list[str]]:
    changes: list[str] = []
    drift: list[str] = []
    current = {t["name"]: t for t in admin.describe_topics() if not t.get("is_internal")}
    to_create = []
    for topic in topics:
        name = topic["name"]
        config = {k: str(v) for k, v in (topic.get("config") or {}).items()}
        if name not in current:
            changes.append(f"create topic {name}")
            to_create.append(
                NewTopic(
                    name, int(topic["partitions"]), int(topic["replication_factor"]), topic_configs=config
                )
            )
            continue
        partitions = current[name]["partitions"]
        have = len(partitions)
        rf = len(partitions[0]["replica_nodes"]) if partitions else 0
        if int(topic["partitions"]) > have:
            changes.append(f"raise {name} partitions {have} -> {topic['partitions']}")
            if not check:
                admin.create_partitions({name: NewPartitions(int(topic["partitions"]))})
        elif int(topic["partitions"]) < have:
            drift.append(f"{name}: {have} partitions, inventory asks {topic['partitions']} (cannot shrink)")
        if rf != int(topic["replication_factor"]):
            drift.append(
                f"{name}: replication factor {rf}, inventory asks {topic['replication_factor']} "
                "(change it with a partition reassignment)"
            )
        if config:
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
            actual = {k: v["value"] for k, v in described["topic"][name].items()}
            differing = {k: v for k, v in config.items() if actual.get(k) != v}
            if differing:
                changes.append(f"set {name} config {differing}")
                if not check:
                    admin.alter_configs(
                        [ConfigResource(ConfigResourceType.TOPIC, name, configs=differing)], incremental=True
                    )
    if to_create and not check:
        admin.create_topics(to_create)
    return changes, drift


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


def disk_report(admin: Any, warn_share: float) -> tuple[dict[str, Any], list[str]]:
    """Each broker's log directories (DescribeLogDirs, no partitions asked), and a warning for
    each one fuller than `warn_share`: a broker says its disk is filling before it dies of it."""
    disks: dict[str, Any] = {}
    warnings = []
    for broker in admin.describe_log_dirs(topic_partitions={}):
        for log_dir in broker["log_dirs"]:
            total, usable = log_dir["total_bytes"], log_dir["usable_bytes"]
            used = round(1 - usable / total, 3) if total > 0 else None
            disks.setdefault(str(broker["broker"]), {})[log_dir["log_dir"]] = {
                "total_bytes": total,
                "usable_bytes": usable,
                "used_share": used,
            }
            if log_dir["error_code"]:
                warnings.append(f"broker {broker['broker']}: log directory {log_dir['log_dir']} is offline")
            elif used is not None and used >= warn_share:
                warnings.append(
                    f"broker {broker['broker']}: disk of {log_dir['log_dir']} is {used:.0%} full "
                    f"({usable:,} of {total:,} bytes free; kafka_disk_warn_share={warn_share})"
                )
    return disks, warnings


def kafka_uuid(value: uuid.UUID | str | None) -> str:
    """A Kafka Uuid as Kafka's tools print and take it (22 base64url characters), "" for none."""
    if value is None:
        return ""
    raw = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    if raw.int == 0:
        return ""
    return base64.urlsafe_b64encode(raw.bytes).decode().rstrip("=")


def health_report(
    admin: Any,
    expect_brokers: int,
    max_lag: int,
    disk_warn_share: float = 1.0,
    expect_voters: list[int] | None = None,
    quorum_only: bool = False,
) -> dict[str, Any]:
    urp, offline = [], []
    for topic in admin.describe_topics():
        for p in topic["partitions"]:
            where = f"{topic['name']}-{p['partition_index']}"
            if p["leader_id"] < 0:
                offline.append(where)
            elif len(p["isr_nodes"]) < len(p["replica_nodes"]):
                urp.append(where)
    brokers = sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced"))
    quorum = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
    hwm = quorum["high_watermark"]
    lag = {v["replica_id"]: max(0, hwm - v["log_end_offset"]) for v in quorum["current_voters"]}
    voters = sorted(lag)
    quorum_healthy = (
        all(v <= max_lag for v in lag.values())
        and quorum["leader_id"] >= 0
        and (not expect_voters or voters == sorted(expect_voters))
    )
    healthy = quorum_healthy and (quorum_only or (not urp and not offline and len(brokers) >= expect_brokers))
    disks, disk_warnings = disk_report(admin, disk_warn_share)
    return {
        "healthy": healthy,
        "under_replicated": urp,
        "offline": offline,
        "brokers": brokers,
        "quorum_leader": quorum["leader_id"],
        "quorum_lag": lag,
        "quorum_voters": voters,
        # A voter is its id and its metadata directory's id: a controller whose disk was replaced
        # comes back with the same id and a new directory, and its old one must leave the voters.
        "quorum_voter_dirs": {
            str(v["replica_id"]): kafka_uuid(v.get("replica_directory_id")) for v in quorum["current_voters"]
        },
        "quorum_observers": sorted(o["replica_id"] for o in quorum.get("observers", [])),
        "disks": disks,
        "disk_warnings": disk_warnings,
    }


def finalized_features(admin: Any) -> dict[str, int]:
    """{feature: finalized level} as the brokers report it (ApiVersions)."""
    described = admin.describe_features()
    return {name: int(info["finalized"][1]) for name, info in described.items() if "finalized" in info}


def features_to_raise(finalized: dict[str, int], wanted: dict[str, int]) -> dict[str, int]:
    """The wanted levels above the finalized ones: raising is all finalize does, never lowering."""
    return {name: int(level) for name, level in sorted(wanted.items()) if int(level) > finalized.get(name, 0)}


def raise_features(admin: Any, wanted: dict[str, int], check: bool) -> dict[str, Any]:
    before = finalized_features(admin)
    to_raise = features_to_raise(before, wanted)
    if not to_raise or check:
        return {"changed": bool(to_raise), "features_before": before, "features": before, "raised": to_raise}
    outcome = admin.update_features(to_raise)
    refused = {name: result for name, result in outcome.items() if result != "OK"}
    if refused:
        return {
            "changed": False,
            "failed": True,
            "msg": f"feature upgrade refused: {refused}",
            "features": before,
        }
    deadline = time.monotonic() + 60
    after = finalized_features(admin)
    while features_to_raise(after, to_raise) and time.monotonic() < deadline:
        time.sleep(1)  # the brokers learn the new levels from the metadata log
        after = finalized_features(admin)
    result = {"changed": True, "features_before": before, "features": after, "raised": to_raise}
    if features_to_raise(after, to_raise):
        result.update(failed=True, msg=f"the brokers still report {after} a minute after raising {to_raise}")
    return result


def balanced_assignment(
    current: dict[tuple[str, int], list[int]], serving: list[int]
) -> dict[tuple[str, int], list[int]]:
    """The partitions to move, each with its new replica list: every replica on a broker outside
    `serving` goes to the emptiest serving broker the partition lacks; then one replica at a time
    moves from the fullest broker to the emptiest, until their counts differ by at most one. A new
    replica takes the old one's place in the list, so preferred leaders move as little as replicas.
    Deterministic; a balanced cluster gives no move."""
    brokers = sorted(set(serving))
    target = {tp: list(replicas) for tp, replicas in current.items()}
    load = dict.fromkeys(brokers, 0)
    for replicas in target.values():
        for broker in replicas:
            if broker in load:
                load[broker] += 1
    for tp in sorted(target):
        replicas = target[tp]
        for i, broker in enumerate(replicas):
            if broker in load:
                continue
            free = [b for b in brokers if b not in replicas]
            if not free:
                raise ValueError(
                    f"{tp[0]}-{tp[1]} has {len(replicas)} replicas, "
                    f"more than the {len(brokers)} brokers in service"
                )
            replicas[i] = min(free, key=lambda b: (load[b], b))
            load[replicas[i]] += 1
    while brokers:
        fullest = max(brokers, key=lambda b: (load[b], -b))
        emptiest = min(brokers, key=lambda b: (load[b], b))
        if load[fullest] - load[emptiest] <= 1:
            break
        # Some partition on the fullest lacks the emptiest, or the emptiest would not be emptier.
        movable = [tp for tp in sorted(target) if fullest in target[tp] and emptiest not in target[tp]]
        tp = min(movable, key=lambda t: target[t][0] == fullest)  # a follower replica first
        target[tp] = [emptiest if b == fullest else b for b in target[tp]]
        load[fullest] -= 1
        load[emptiest] += 1
    return {tp: replicas for tp, replicas in target.items() if replicas != current[tp]}


BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def _throttle(admin: Any, brokers: list[int], topics: list[str], rate: int | None) -> None:
    """Set the replication throttle on these brokers and topics, or (rate None) remove it."""

    def value(v: str) -> Any:
        return v if rate is not None else ("DELETE", "")

    resources = [
        ConfigResource(
            ConfigResourceType.BROKER, str(b), configs={k: value(str(rate)) for k in BROKER_THROTTLES}
        )
        for b in brokers
    ] + [
        ConfigResource(ConfigResourceType.TOPIC, t, configs={k: value("*") for k in TOPIC_THROTTLES})
        for t in topics
    ]
    admin.alter_configs(resources, incremental=True, raise_on_unknown=False)


def rebalance(
    admin: Any, serving: list[int], throttle: int, wait_timeout: int, check: bool
) -> dict[str, Any]:
    ongoing = admin.list_partition_reassignments()
    if ongoing:
        moving = sorted(f"{tp.topic}-{tp.partition}" for tp in ongoing)
        msg = f"partitions are still moving from an earlier reassignment, run again when done: {moving}"
        return {"changed": False, "failed": True, "msg": msg}
    current = {
        (t["name"], p["partition_index"]): list(p["replica_nodes"])
        for t in admin.describe_topics()
        for p in t["partitions"]
    }
    moves = balanced_assignment(current, serving)
    result: dict[str, Any] = {
        "changed": bool(moves),
        "moves": [f"{t}-{p}: {current[(t, p)]} -> {r}" for (t, p), r in sorted(moves.items())],
    }
    if not moves or check:
        return result
    brokers = sorted({b for replicas in current.values() for b in replicas} | set(serving))
    topics = sorted({t for t, _ in moves})
    if throttle > 0:
        _throttle(admin, brokers, topics, throttle)
    try:
        wanted = {TopicPartition(t, p): r for (t, p), r in moves.items()}
        accepted = admin.alter_partition_reassignments(wanted)
        refused = {f"{tp.topic}-{tp.partition}": str(error) for tp, error in accepted.items() if error}
        if refused:
            result.update(failed=True, msg=f"partition moves refused: {refused}")
            return result
        deadline = time.monotonic() + wait_timeout
        while admin.list_partition_reassignments():
            if time.monotonic() >= deadline:
                result.update(
                    failed=True,
                    msg=f"partition moves not done within {wait_timeout}s; they go on, unthrottled from now",
                )
                return result
            time.sleep(2)
    finally:
        if throttle > 0:
            _throttle(admin, brokers, topics, None)
    return result


def _client_options(params: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap_servers": params["bootstrap_servers"],
        "security_protocol": params["security_protocol"],
        "request_timeout_ms": 15000,
    }
    if params["security_protocol"] == "SSL":
        options.update(
            ssl_cafile=params["ssl_cafile"], ssl_certfile=params["ssl_certfile"], ssl_check_hostname=True
        )
    return options


def connect(params: dict[str, Any]) -> Any:
    return KafkaAdminClient(**_client_options(params))


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
    if params["action"] == "rebalance":
        admin = connect(params)
        try:
            return rebalance(
                admin, params["serving_brokers"], params["throttle_bytes"], params["wait_timeout"], check
            )
        finally:
            admin.close()
    if params["action"] == "throttle":
        if check:
            return {"changed": True}
        admin = connect(params)
        try:
            topics = sorted(t["name"] for t in admin.describe_topics())
            _throttle(admin, params["serving_brokers"], topics, params["throttle_bytes"] or None)
        finally:
            admin.close()
        return {"changed": True, "throttled_topics": len(topics) if params["throttle_bytes"] else 0}
    if params["action"] == "features":
        admin = connect(params)
        try:
            return raise_features(admin, params["feature_levels"], check)
        finally:
            admin.close()
    admin = connect(params)
    try:
        changes, drift = reconcile_topics(admin, params["topics"], check)
        acl_changes, acl_drift = reconcile_acls(
            admin, params["acls"], params["remove_extra_acls"], check, frozenset(params["owned_principals"])
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
        "choices": ["reconcile", "health", "features", "rebalance", "throttle", "end_offsets"],
        "default": "reconcile",
    },
    "bootstrap_servers": {"type": "list", "elements": "str", "required": True},
    "security_protocol": {"type": "str", "default": "SSL", "choices": ["SSL", "PLAINTEXT"]},
    "ssl_cafile": {"type": "path"},
    "ssl_certfile": {"type": "path"},
    "topics": {"type": "list", "elements": "dict", "default": []},
    "acls": {"type": "list", "elements": "dict", "default": []},
    "remove_extra_acls": {"type": "bool", "default": False},
    "owned_principals": {"type": "list", "elements": "str", "default": []},
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
