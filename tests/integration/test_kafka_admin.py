"""The kafka role's kafka_admin module against a real broker: topics, ACLs, health."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.pikit.cluster.plugins.modules import kafka_admin
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import TopicAuthorizationFailedError
from pikit_testkit.broker import LocalBroker
from pikit_testkit.certs import certificate, new_key, pem
from pikit_testkit.polling import wait_for

from pikit.topic import read_to_end


def params(broker: str, **overrides: Any) -> dict[str, Any]:
    given = {"bootstrap_servers": [broker], "security_protocol": "PLAINTEXT", "expect_brokers": 1} | overrides
    return dict(kafka_admin.params_with_defaults(**given))


READINGS = {
    "name": "it-readings",
    "partitions": 2,
    "replication_factor": 1,
    "config": {"retention.ms": 60000},
}
COMPACTED = {
    "name": "it-latest",
    "partitions": 1,
    "replication_factor": 1,
    "config": {"cleanup.policy": "compact"},
}
EDGE_ACL = {
    "principal": "User:edge-9",
    "resource_type": "topic",
    "resource_name": "it-readings",
    "operations": ["write", "describe"],
}
SPARK_GROUP_ACL = {
    "principal": "User:spark",
    "resource_type": "group",
    "resource_name": "spark-kafka-",
    "pattern_type": "prefixed",
    "operations": ["read"],
}


def settled(parameters: dict[str, Any]) -> dict[str, Any]:
    """A run once the broker shows the last change: right after one, a run may read metadata that
    the broker has not replayed yet, and make the same change again (harmless, and not idempotence's
    question). Returns the last run's result; the caller asserts on it."""
    result: dict[str, Any] = {}

    def unchanged() -> bool:
        nonlocal result
        result = kafka_admin.run(parameters, check=False)
        return not result["changed"]

    with contextlib.suppress(AssertionError):
        wait_for("a run that changes nothing", unchanged, timeout=30, every=1)
    return result


def test_topics_are_created_raised_and_drift_reported(broker: str) -> None:
    first = kafka_admin.run(params(broker, topics=[READINGS, COMPACTED]), check=False)
    assert first["changed"]
    assert "create topic it-readings" in first["changes"]
    assert settled(params(broker, topics=[READINGS, COMPACTED]))["changed"] is False

    wider = {**READINGS, "partitions": 4, "config": {"retention.ms": 120000}}
    check_only = kafka_admin.run(params(broker, topics=[wider]), check=True)
    assert check_only["changes"] == [
        "raise it-readings partitions 2 -> 4",
        "set it-readings config {'retention.ms': '120000'}",
    ]
    raised = kafka_admin.run(params(broker, topics=[wider]), check=False)
    assert raised["changed"]
    again = settled(params(broker, topics=[wider]))
    assert again["changed"] is False

    impossible = {**wider, "partitions": 1, "replication_factor": 3}
    drifted = kafka_admin.run(params(broker, topics=[impossible]), check=False)
    assert drifted["changed"] is False
    assert any("cannot shrink" in d for d in drifted["drift"])
    assert any("replication factor 1, inventory asks 3" in d for d in drifted["drift"])
    # A topic whose records are placed by key, as the readings topic's by device, keeps its count.
    fixed = {**wider, "partitions": 6, "fixed_partitions": True}
    kept = kafka_admin.run(params(broker, topics=[fixed]), check=False)
    assert kept["changed"] is False
    assert any("(fixed_partitions:" in d and "4 partitions, inventory asks 6" in d for d in kept["drift"])


def test_a_topic_marked_absent_is_deleted_only_once_confirmed(broker: str) -> None:
    """Unconfirmed, the run fails naming the topic and changes no topic, not even another one it
    would create; confirmed, the topic goes; then the run changes nothing."""
    doomed = {"name": "it-doomed", "partitions": 1, "replication_factor": 1}
    kafka_admin.run(params(broker, topics=[doomed]), check=False)
    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    producer.send("it-doomed", b"kept until confirmed").get(timeout=30)
    producer.close()
    absent = {**doomed, "state": "absent"}
    bystander = {"name": "it-bystander", "partitions": 1, "replication_factor": 1}
    with pytest.raises(RuntimeError, match=r"marks it-doomed state: absent.*kafka_topics_delete_confirmed"):
        kafka_admin.run(params(broker, topics=[bystander, absent]), check=False)
    admin = KafkaAdminClient(bootstrap_servers=broker)
    try:
        assert {"it-doomed"} <= set(admin.list_topics()) and "it-bystander" not in admin.list_topics()
        confirmed = params(broker, topics=[absent], delete_topics_confirmed=["it-doomed"])
        assert kafka_admin.run(confirmed, check=False)["changes"] == ["delete topic it-doomed"]
        wait_for("it-doomed deleted", lambda: "it-doomed" not in admin.list_topics(), timeout=30)
    finally:
        admin.close()
    assert settled(confirmed)["changed"] is False, "an absent topic that is gone changes nothing"


def test_records_before_an_offset_or_a_time_are_deleted_and_the_rest_stay(broker: str) -> None:
    topic = {"name": "it-flooded", "partitions": 1, "replication_factor": 1}
    kafka_admin.run(params(broker, topics=[topic]), check=False)
    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    for i in range(10):  # ten records an hour ago (a firmware bug's garbage), then five good ones
        producer.send("it-flooded", f"bad {i}".encode(), timestamp_ms=int((time.time() - 3600) * 1000))
    cut_at = int(time.time() * 1000) - 60_000
    for i in range(5):
        producer.send("it-flooded", f"good {i}".encode())
    producer.flush()
    producer.close()
    by_offset = params(broker, action="delete_records", topic="it-flooded", before_offset=3)
    assert kafka_admin.run(by_offset, check=True)["changes"] == ["it-flooded[0]: records 0..2 deleted (3)"]
    assert kafka_admin.run(by_offset, check=False)["deleted"] == 3
    by_time = params(broker, action="delete_records", topic="it-flooded", before_time_ms=cut_at)
    assert kafka_admin.run(by_time, check=False)["changes"] == ["it-flooded[0]: records 3..9 deleted (7)"]
    assert kafka_admin.run(by_time, check=False)["changed"] is False, "a second cut deletes nothing"
    left = read_to_end("it-flooded", bootstrap_servers=[broker])
    assert [r.value for r in left] == [f"good {i}".encode() for i in range(5)]


def test_acls_are_added_and_extras_removed_only_on_request(broker: str) -> None:
    added = kafka_admin.run(params(broker, acls=[EDGE_ACL, SPARK_GROUP_ACL]), check=False)
    assert len(added["changes"]) == 3
    assert settled(params(broker, acls=[EDGE_ACL, SPARK_GROUP_ACL]))["changed"] is False

    kept = kafka_admin.run(params(broker, acls=[EDGE_ACL]), check=False)
    assert kept["changed"] is False
    assert any("spark-kafka-" in d for d in kept["drift"])

    removed = kafka_admin.run(params(broker, acls=[EDGE_ACL], remove_extra_acls=True), check=False)
    assert removed["changes"] == [
        "remove ACL ('User:spark', 'GROUP', 'spark-kafka-', 'PREFIXED', 'READ', 'ALLOW', '*')"
    ]
    final = settled(params(broker, acls=[EDGE_ACL], remove_extra_acls=True))
    assert final == {"changed": False, "changes": [], "drift": []}


def test_a_site_taken_off_a_core_loses_its_acls_without_remove_extra(broker: str) -> None:
    """On a core, the ACLs of every principal with the sites' prefix are the kit's whole: a site taken
    out of kafka_mirror_sites loses its rights on the next run, others' unlisted ACLs stay drift."""

    def site_acl(site: str) -> dict[str, Any]:
        return {
            "principal": f"User:site.{site}",
            "resource_type": "topic",
            "resource_name": f"{site}.",
            "pattern_type": "prefixed",
            "operations": ["write"],
        }

    owned = {"owned_principal_prefixes": ["User:site."]}
    both = [EDGE_ACL, site_acl("greenhouse"), site_acl("school")]
    assert kafka_admin.run(params(broker, acls=both, **owned), check=False)["changed"]
    settled(params(broker, acls=both, **owned))
    outsider = {**SPARK_GROUP_ACL, "principal": "User:sitex"}  # the prefix is "site.", not "site"
    kafka_admin.run(params(broker, acls=[*both, outsider], **owned), check=False)
    settled(params(broker, acls=[*both, outsider], **owned))

    one = [EDGE_ACL, site_acl("greenhouse")]
    result = kafka_admin.run(params(broker, acls=one, **owned), check=False)
    assert result["changes"] == [
        "remove ACL ('User:site.school', 'TOPIC', 'school.', 'PREFIXED', 'WRITE', 'ALLOW', '*')"
    ], result
    assert any("User:sitex" in d for d in result["drift"]), "a principal outside the prefix is kept"
    final = settled(params(broker, acls=one, **owned))
    assert final["changed"] is False and not any("site." in d for d in final["drift"]), final
    kafka_admin.run(params(broker, acls=[EDGE_ACL], remove_extra_acls=True), check=False)


def test_health_reports_a_healthy_single_node(broker: str) -> None:
    result = kafka_admin.run(params(broker, action="health", wait_timeout=30), check=False)
    assert result["health"]["healthy"], result
    assert result["health"]["brokers"] == [1]


def test_health_reports_the_log_directory_and_warns_past_the_share(broker: str) -> None:
    quiet = kafka_admin.run(params(broker, action="health", disk_warn_share=1.0), check=False)
    disks = quiet["health"]["disks"]["1"]
    (log_dir,) = disks.values()
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    assert 0 <= log_dir["used_share"] < 1
    assert quiet["health"]["disk_warnings"] == []
    loud = kafka_admin.run(
        params(broker, action="health", disk_warn_share=log_dir["used_share"] / 2), check=False
    )
    (warning,) = loud["health"]["disk_warnings"]
    assert warning.startswith(f"broker 1: disk of {next(iter(disks))} is ")
    assert loud["health"]["healthy"], "a full disk warns, it does not fail the gate"


def test_health_waits_then_fails_when_brokers_are_missing(broker: str) -> None:
    result = kafka_admin.run(params(broker, action="health", expect_brokers=3, wait_timeout=3), check=False)
    assert result["failed"] is True
    assert result["health"]["healthy"] is False


def test_health_names_the_voters_and_waits_for_the_expected_ones(broker: str) -> None:
    result = kafka_admin.run(params(broker, action="health", expect_voters=[1]), check=False)
    assert result["health"]["quorum_voters"] == [1] and result["health"]["healthy"], result
    assert result["health"]["quorum_observers"] == [], "a combined node is a voter, not an observer"
    waiting = kafka_admin.run(
        params(broker, action="health", expect_voters=[1, 2], wait_timeout=3), check=False
    )
    assert waiting["failed"] is True and waiting["health"]["healthy"] is False


def test_health_gives_each_voter_s_directory_and_can_judge_the_quorum_alone(broker: str) -> None:
    """remove-controller names a voter by its id and metadata directory id, which the quorum
    reports; a voter change waits on the quorum alone, not on partitions a broker still rebuilds."""
    result = kafka_admin.run(params(broker, action="health"), check=False)
    dirs = result["health"]["quorum_voter_dirs"]
    assert list(dirs) == ["1"], result
    assert dirs["1"] == "" or len(dirs["1"]) == 22, "Kafka's base64url form, or none for a static quorum"
    short = params(broker, action="health", expect_brokers=2, quorum_only=True)
    assert kafka_admin.run(short, check=False)["health"]["healthy"], "one broker short, the quorum is fine"
    assert not kafka_admin.run({**short, "quorum_only": False}, check=False)["health"]["healthy"]


def test_the_rebuild_throttle_is_set_and_lifted(broker: str) -> None:
    kafka_admin.run(params(broker, topics=[READINGS]), check=False)

    def throttles() -> list[str]:
        admin = kafka_admin.connect(params(broker))
        try:
            found = admin.describe_configs(
                [
                    ConfigResource(ConfigResourceType.BROKER, "1"),
                    ConfigResource(ConfigResourceType.TOPIC, READINGS["name"]),
                ]
            )
        finally:
            admin.close()
        return sorted(
            k for by_name in found.values() for c in by_name.values() for k in c if "throttled" in k
        )

    kafka_admin.run(
        params(broker, action="throttle", serving_brokers=[1], throttle_bytes=1048576), check=False
    )
    assert throttles() == [
        "follower.replication.throttled.rate",
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.rate",
        "leader.replication.throttled.replicas",
    ]
    kafka_admin.run(params(broker, action="throttle", serving_brokers=[1], throttle_bytes=0), check=False)
    assert throttles() == []


def test_features_are_read_and_never_lowered(broker: str) -> None:
    lower = params(broker, action="features", feature_levels={"metadata.version": 1})
    result = kafka_admin.run(lower, check=False)
    assert result["changed"] is False
    assert result["features"]["metadata.version"] > 1, result


def test_a_balanced_single_broker_moves_nothing(broker: str) -> None:
    kafka_admin.run(params(broker, topics=[READINGS]), check=False)
    same = params(broker, action="rebalance", serving_brokers=[1], wait_timeout=30)
    result = kafka_admin.run(same, check=False)
    assert result == {"changed": False, "moves": []}


def test_the_replication_throttle_is_set_and_removed(broker: str) -> None:
    kafka_admin.run(params(broker, topics=[READINGS]), check=False)
    admin = kafka_admin.connect(params(broker))
    resources = [
        ConfigResource(ConfigResourceType.BROKER, "1"),
        ConfigResource(ConfigResourceType.TOPIC, "it-readings"),
    ]

    def throttles() -> dict[str, str]:
        found = {}
        for described in admin.describe_configs(resources).values():
            for name, entries in described.items():
                for key, entry in entries.items():
                    if "throttled" in key and entry["value"] not in (None, "", "9223372036854775807"):
                        found[f"{name} {key}"] = entry["value"]
        return found

    expected = {
        "1 leader.replication.throttled.rate": "1048576",
        "1 follower.replication.throttled.rate": "1048576",
        "it-readings leader.replication.throttled.replicas": "*",
        "it-readings follower.replication.throttled.replicas": "*",
    }
    try:
        # A broker applies its dynamic configuration when it replays the metadata log: a describe
        # right after the change may still show the old values.
        kafka_admin.throttle(admin, [1], ["it-readings"], 1048576)
        with contextlib.suppress(AssertionError):
            wait_for("the throttles set", lambda: throttles() == expected, timeout=30, every=0.5)
        assert throttles() == expected
        kafka_admin.throttle(admin, [1], ["it-readings"], None)
        with contextlib.suppress(AssertionError):
            wait_for("the throttles removed", lambda: throttles() == {}, timeout=30, every=0.5)
        assert throttles() == {}
    finally:
        admin.close()


def test_an_unknown_operation_is_named(broker: str) -> None:
    with pytest.raises(ValueError, match=r"kafka_acls entry for User:edge-9: unknown operations \['FLY'\]"):
        kafka_admin.run(params(broker, acls=[{**EDGE_ACL, "operations": ["fly"]}]), check=False)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalBroker, Path, Path]]:
    """A broker with an mTLS listener (the admin, CN=bench, a super user) and a SASL_SSL one.
    Beside the admin's bundle, a device's: edge-9.pem, CN=edge-9, no rights of its own."""
    work = tmp_path_factory.mktemp("kafka-sasl")
    ca_key, key, device_key = new_key(), new_key(), new_key()
    ca, bundle = work / "ca.crt", work / "bench.pem"
    ca.write_bytes(pem(None, certificate("it CA", ca_key, "it CA", ca_key, ca=True)))
    bundle.write_bytes(pem(key, certificate("bench", key, "it CA", ca_key, ip="127.0.0.1")))
    (work / "edge-9.pem").write_bytes(pem(device_key, certificate("edge-9", device_key, "it CA", ca_key)))
    local = LocalBroker(work / "kafka", tls=(bundle, ca), sasl=True, short_lived=True)
    local.start()
    yield local, ca, bundle
    local.stop()


def test_scram_users_are_created_kept_and_reset_when_their_password_changes(
    sasl_broker: tuple[LocalBroker, Path, Path],
) -> None:
    local, ca, bundle = sasl_broker
    base = params(
        local.address,
        security_protocol="SSL",
        ssl_cafile=str(ca),
        ssl_certfile=str(bundle),
        sasl_bootstrap_servers=[local.sasl_address],
    )
    first = {"name": "dashboard", "password": "first-password-1"}
    second = {"name": "dashboard", "password": "second-password-2"}
    assert kafka_admin.run({**base, "scram_users": [first]}, check=False)["changes"] == [
        "SCRAM user dashboard: created"
    ]
    again = settled({**base, "scram_users": [first]})
    assert not again["changed"] and again["drift"] == []
    assert kafka_admin.scram_login_works(base, first) and not kafka_admin.scram_login_works(base, second)
    # In check mode a changed password is reported, not stored.
    checked = kafka_admin.run({**base, "scram_users": [second]}, check=True)
    assert checked["changes"] == ["SCRAM user dashboard: password reset"]
    assert kafka_admin.scram_login_works(base, first)
    reset = kafka_admin.run({**base, "scram_users": [second]}, check=False)
    assert reset["changes"] == ["SCRAM user dashboard: password reset"]
    assert kafka_admin.scram_login_works(base, second) and not kafka_admin.scram_login_works(base, first)
    unlisted = kafka_admin.run(base, check=False)
    assert not unlisted["changed"]
    assert unlisted["drift"] == ["SCRAM user dashboard is not in kafka_scram_users (left alone)"]


def test_a_revoked_device_is_refused_without_a_restart_and_restored(
    sasl_broker: tuple[LocalBroker, Path, Path],
) -> None:
    """The kit owns its devices' ACLs whole: revoking takes the allow back (without
    remove_extra_acls) and adds the deny; the run returns once the broker applied them, and the
    device's next send is refused. Restoring lets it write again; end_offsets gives the fence."""
    local, ca, bundle = sasl_broker
    base = params(local.address, security_protocol="SSL", ssl_cafile=str(ca), ssl_certfile=str(bundle))
    device, topic = "User:CN=edge-9", "it-revoke"
    allow = {
        "principal": device,
        "resource_type": "topic",
        "resource_name": topic,
        "operations": ["write", "describe"],
    }
    deny = {
        "principal": device,
        "resource_type": "topic",
        "resource_name": "*",
        "operations": ["all"],
        "permission": "deny",
    }
    topics = [{"name": topic, "partitions": 2, "replication_factor": 1}]
    kafka_admin.run({**base, "topics": topics, "acls": [allow], "wait_timeout": 30}, check=False)
    as_device = {
        "bootstrap_servers": [local.address],
        "security_protocol": "SSL",
        "ssl_cafile": str(ca),
        "ssl_certfile": str(bundle.parent / "edge-9.pem"),
    }

    def sends() -> bool:
        producer = KafkaProducer(**as_device, acks="all", max_block_ms=10000, retries=0)
        try:
            producer.send(topic, b"reading").get(timeout=15)
            return True
        except TopicAuthorizationFailedError:
            return False
        finally:
            producer.close(timeout=5)

    assert sends()
    owned = {"owned_principals": [device], "wait_timeout": 30}
    revoked = kafka_admin.run({**base, "acls": [deny], **owned}, check=False)
    assert sorted(c.split(" ACL ")[0] for c in revoked["changes"]) == ["add"] + ["remove"] * 2
    assert revoked["propagated_s"] < 30
    assert not sends()
    ends = kafka_admin.run({**base, "action": "end_offsets", "topic": topic}, check=False)["end_offsets"]
    assert sorted(ends) == ["0", "1"] and sum(ends.values()) == 1  # the one reading sent
    restored = kafka_admin.run({**base, "acls": [allow], **owned}, check=False)
    assert any(c.startswith("remove ACL ('User:CN=edge-9', 'TOPIC', '*'") for c in restored["changes"])
    assert sends()
    assert settled({**base, "acls": [allow], **owned})["changed"] is False


def test_device_quotas_are_set_changed_and_removed_and_others_left_alone(broker: str) -> None:
    """Each listed user's producer quota is set; an owned user's unlisted quota is removed; a quota
    the kit does not own is drift."""
    devices = {"User:edge-1", "User:edge-2"}
    first = kafka_admin.run(
        params(broker, quotas={"edge-1": 4096, "edge-2": 4096, "ops": 10**6}), check=False
    )
    assert sorted(first["changes"]) == [
        "quota of edge-1: None -> 4096 bytes/s",
        "quota of edge-2: None -> 4096 bytes/s",
        "quota of ops: None -> 1e+06 bytes/s",
    ]
    owned = {"owned_principals": sorted(devices)}
    again = settled(params(broker, quotas={"edge-1": 4096, "edge-2": 4096, "ops": 10**6}, **owned))
    assert again["changed"] is False
    changed = kafka_admin.run(params(broker, quotas={"edge-1": 8192}, **owned), check=False)
    assert sorted(changed["changes"]) == [
        "quota of edge-1: 4096.0 -> 8192 bytes/s",
        "quota of edge-2: 4096 bytes/s removed",
    ]
    quota_drift = [d for d in changed["drift"] if d.startswith("quota")]  # the module's broker has ACLs too
    assert quota_drift == ["quota of ops (1e+06 bytes/s) is not the kit's (left alone)"]
    final = settled(params(broker, quotas={"edge-1": 8192}, **owned))
    assert not final["changed"]


def test_a_device_flooding_at_many_times_its_quota_is_held_near_it(
    sasl_broker: tuple[LocalBroker, Path, Path],
) -> None:
    """A device that sends as fast as the broker acknowledges is slowed to about its quota: what the
    broker acknowledged over 20 s, against the quota (Kafka lets a burst through before the
    throttle, so the bound is loose; unthrottled, this producer sends hundreds of times more)."""
    local, ca, bundle = sasl_broker
    base = params(local.address, security_protocol="SSL", ssl_cafile=str(ca), ssl_certfile=str(bundle))
    quota, topic = 8192, "it-flood"
    allow = {
        "principal": "User:CN=edge-9",
        "resource_type": "topic",
        "resource_name": topic,
        "operations": ["write", "describe"],
    }
    topics = [{"name": topic, "partitions": 1, "replication_factor": 1}]
    kafka_admin.run({**base, "topics": topics, "acls": [allow], "quotas": {"CN=edge-9": quota}}, check=False)
    producer = KafkaProducer(
        bootstrap_servers=[local.address],
        security_protocol="SSL",
        ssl_cafile=str(ca),
        ssl_certfile=str(bundle.parent / "edge-9.pem"),
        acks="all",
        linger_ms=5,
    )
    acked = offered = 0
    record = b"x" * 1000
    backlog = 64  # records sent and not yet acknowledged, at most: close() then drains in seconds

    def counted(_: Any) -> None:
        nonlocal acked
        acked += len(record)

    started = time.monotonic()
    while time.monotonic() - started < 20:
        while offered - acked < backlog * len(record):
            producer.send(topic, record).add_callback(counted)
            offered += len(record)
        time.sleep(0.001)
    elapsed = time.monotonic() - started
    throttled = max(group.get("throttle-time-max", 0.0) for group in producer.metrics().values())
    rate = acked / elapsed
    producer.close(timeout=60)
    print(
        f"flood: {rate:.0f} B/s acknowledged in {elapsed:.0f} s, quota {quota}; "
        f"longest throttle {throttled:.0f} ms"
    )
    assert throttled > 0
    assert rate < 3 * quota
