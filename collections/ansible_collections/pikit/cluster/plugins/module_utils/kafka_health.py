"""The cluster's health: partitions, brokers, the metadata quorum, and the brokers' disks."""

from __future__ import annotations

import base64
import uuid
from typing import Any


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
