"""The kafka role's filter plugins."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.conftest import load_filter_plugin


def load() -> ModuleType:
    return load_filter_plugin("kafka", "kafka_filters")


filters = load()


def test_scram_users_become_add_scram_arguments() -> None:
    # Each of these passwords was formatted into a real cluster by kafka-storage 4.3.
    users = [{"name": "dashboard", "password": "a b]=c[d"}, {"name": "etl", "password": "p" * 32}]
    assert filters.kafka_scram_format_args(users, 8192) == [
        "--add-scram",
        'SCRAM-SHA-512=[name=dashboard,iterations=8192,password="a b]=c[d"]',
        "--add-scram",
        f'SCRAM-SHA-512=[name=etl,iterations=8192,password="{"p" * 32}"]',
    ]


def test_no_users_no_arguments() -> None:
    assert filters.kafka_scram_format_args([], 8192) == []


@pytest.mark.parametrize("password", ['a"b', "a,b"])
def test_a_comma_or_double_quote_is_refused_naming_the_user(password: str) -> None:
    with pytest.raises(ValueError, match="dashboard"):
        filters.kafka_scram_format_args([{"name": "dashboard", "password": password}], 8192)


def test_the_role_exposes_the_filter() -> None:
    assert "kafka_scram_format_args" in filters.FilterModule().filters()


def test_voters_list_each_controller_as_id_at_address_and_port() -> None:
    nodes = [{"id": 1, "address": "10.0.0.1"}, {"id": "2", "address": "pi-2.lan"}]
    assert load().kafka_voters(nodes, "9093") == "1@10.0.0.1:9093,2@pi-2.lan:9093"


def test_initial_controllers_give_each_voter_its_directory_id() -> None:
    nodes = [{"id": 1, "address": "10.0.0.1"}, {"id": 2, "address": "pi-2.lan"}]
    ids = ["J8mqMmNkQqq1Y9rYf8hWXw", "b2-kXYNcT8uOdwaBXsrY-Q"]
    assert load().kafka_initial_controllers(nodes, 9093, ids) == (
        "1@10.0.0.1:9093:J8mqMmNkQqq1Y9rYf8hWXw,2@pi-2.lan:9093:b2-kXYNcT8uOdwaBXsrY-Q"
    )


@pytest.mark.parametrize(
    ("ids", "why"),
    [
        (["J8mqMmNkQqq1Y9rYf8hWXw"], "need 2 distinct directory ids"),
        (["J8mqMmNkQqq1Y9rYf8hWXw", "J8mqMmNkQqq1Y9rYf8hWXw"], "need 2 distinct directory ids"),
        (["J8mqMmNkQqq1Y9rYf8hWXw", "not an id"], "is not a Kafka Uuid"),
    ],
)
def test_initial_controllers_refuse_missing_shared_or_malformed_ids(ids: list[str], why: str) -> None:
    nodes = [{"id": 1, "address": "10.0.0.1"}, {"id": 2, "address": "10.0.0.2"}]
    with pytest.raises(ValueError, match=why):
        load().kafka_initial_controllers(nodes, 9093, ids)


def test_a_dynamic_quorum_advertises_the_controller_listener() -> None:
    controller = filters.kafka_listeners("10.0.0.3", False, True, PORTS, True)
    assert controller["advertised"] == "CONTROLLER://10.0.0.3:9093"
    combined = filters.kafka_listeners("10.0.0.1", True, True, PORTS, True)
    assert combined["advertised"].split(",")[-1] == "CONTROLLER://10.0.0.1:9093"
    assert (
        filters.kafka_listeners("10.0.0.2", True, False, PORTS, True)["advertised"].count("CONTROLLER") == 0
    )


def test_restart_order_is_dedicated_controllers_then_combined_nodes_then_brokers() -> None:
    controllers = ["c1", "both-1", "c2", "both-2"]
    brokers = ["b1", "both-2", "both-1", "b2"]
    order = load().kafka_restart_order(controllers, brokers)
    assert order == ["c1", "c2", "both-1", "both-2", "b1", "b2"]


@pytest.mark.parametrize(
    ("active", "expected"),
    [
        ("c1", ["c2", "c1", "both-1", "both-2", "b1", "b2"]),
        ("both-1", ["c1", "c2", "both-2", "both-1", "b1", "b2"]),
        ("", ["c1", "c2", "both-1", "both-2", "b1", "b2"]),
    ],
)
def test_the_active_controller_restarts_last_of_its_tier(active: str, expected: list[str]) -> None:
    controllers = ["c1", "both-1", "c2", "both-2"]
    brokers = ["b1", "both-2", "both-1", "b2"]
    assert load().kafka_restart_order(controllers, brokers, active) == expected


def test_default_acls_give_devices_the_readings_topic_and_spark_the_rest() -> None:
    acls = load().kafka_default_acls(["edge-1", "edge-2"], "spark", "readings", ["aggregates", "late"])
    as_text = {
        (
            a["principal"],
            a["resource_type"],
            a["resource_name"],
            a.get("pattern_type", "literal"),
            *a["operations"],
        )
        for a in acls
    }
    assert as_text == {
        ("User:edge-1", "topic", "readings", "literal", "write", "describe"),
        ("User:edge-2", "topic", "readings", "literal", "write", "describe"),
        ("User:spark", "topic", "readings", "literal", "read", "describe"),
        ("User:spark", "topic", "aggregates", "literal", "write", "describe", "read"),
        ("User:spark", "topic", "late", "literal", "write", "describe", "read"),
        ("User:spark", "topic", "pikit-spark-", "prefixed", "create", "write", "describe", "read"),
        ("User:spark", "group", "spark-kafka-", "prefixed", "read", "describe"),
        ("User:spark", "group", "pikit-spark-", "prefixed", "read", "describe"),
        ("User:spark", "transactional_id", "pikit-spark-", "prefixed", "write", "describe"),
    }
    assert len(acls) == len(as_text)


def test_connect_workers_own_their_groups_topics_and_read_the_pipelines_and_nothing_else() -> None:
    connect = {"principal": "connect", "group_id": "pikit-connect"}
    acls = load().kafka_default_acls(["edge-1"], "spark", "readings", ["aggregates"], [], connect)
    mine = {
        (a["resource_type"], a["resource_name"], a.get("pattern_type", "literal"), *a["operations"])
        for a in acls
        if a["principal"] == "User:connect"
    }
    assert mine == {
        ("topic", "pikit-connect-", "prefixed", "all"),
        ("topic", "mm2-offset-syncs.", "prefixed", "all"),
        ("topic", "readings", "literal", "read", "describe", "describe_configs"),
        ("topic", "aggregates", "literal", "read", "describe", "describe_configs"),
        ("group", "pikit-connect", "literal", "read", "describe"),
        ("group", "connect-", "prefixed", "read", "describe"),
        ("transactional_id", "connect-cluster-pikit-connect", "literal", "write", "describe"),
        ("transactional_id", "pikit-connect-", "prefixed", "write", "describe"),
    }
    assert not [
        a
        for a in load().kafka_default_acls(["edge-1"], "spark", "readings", [])
        if "connect" in a["principal"]
    ]


def test_a_core_holds_each_site_to_its_own_prefix_which_covers_no_other_site() -> None:
    acls = filters.kafka_mirror_site_acls(["greenhouse", "green"], "pikit-connect", "site.")
    got = {(a["principal"], a["resource_type"], a["resource_name"], a["pattern_type"]) for a in acls}
    assert got == {
        ("User:site.greenhouse", "topic", "greenhouse.", "prefixed"),
        ("User:site.greenhouse", "transactional_id", "pikit-connect-greenhouse.", "prefixed"),
        ("User:site.green", "topic", "green.", "prefixed"),
        ("User:site.green", "transactional_id", "pikit-connect-green.", "prefixed"),
    }
    # Connect's transactional ids are <group>-<connector>-<task>; a connector is <site>.mirror.
    assert not "pikit-connect-greenhouse.mirror-0".startswith("pikit-connect-green.")


@pytest.mark.parametrize(("sites", "why"), [(["a.b"], "letters, digits"), (["x", "x"], "twice")])
def test_a_site_name_that_could_reach_past_its_prefix_is_refused(sites: list[str], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        filters.kafka_mirror_site_acls(sites)


def test_a_mirrored_topic_that_keeps_its_records_less_than_an_uplink_outage_is_named() -> None:
    topics = [
        {"name": "sensor-aggregates", "config": {"retention.ms": 3_600_000}},
        {"name": "sensor-alerts", "config": {"retention.ms": -1}},
        {"name": "sensor-late"},
        {"name": "not-mirrored", "config": {"retention.ms": 1}},
        {"name": "sensor-dead-letters", "config": {"retention.ms": 86_400_000}},
    ]
    names = ["sensor-aggregates", "sensor-alerts", "sensor-late", "sensor-dead-letters"]
    assert filters.kafka_short_retention(topics, names, 24) == ["sensor-aggregates"]
    assert filters.kafka_short_retention(topics, names, 25) == ["sensor-aggregates", "sensor-dead-letters"]


def test_a_revoked_device_loses_its_allow_and_is_denied_every_topic() -> None:
    acls = load().kafka_default_acls(["edge-1", "edge-2"], "spark", "readings", ["aggregates"], ["edge-2"])
    mine = [a for a in acls if a["principal"] == "User:edge-2"]
    assert mine == [
        {
            "principal": "User:edge-2",
            "resource_type": "topic",
            "resource_name": "*",
            "operations": ["all"],
            "permission": "deny",
        }
    ]
    assert {
        "principal": "User:edge-1",
        "resource_type": "topic",
        "resource_name": "readings",
        "operations": ["write", "describe"],
    } in acls
    # A revoked device that is no longer a host (taken out of the inventory) stays denied.
    gone = load().kafka_default_acls(["edge-1"], "spark", "readings", [], ["edge-9"])
    assert [a["principal"] for a in gone if a.get("permission") == "deny"] == ["User:edge-9"]


PORTS = {"client": 9092, "internal": 9094, "controller": 9093, "sasl": 0, "plaintext": 0}


def test_listeners_of_a_combined_node_a_broker_and_a_controller() -> None:
    combined = filters.kafka_listeners("10.0.0.1", True, True, PORTS)
    assert combined == {
        "listeners": "CLIENT://0.0.0.0:9092,INTERNAL://0.0.0.0:9094,CONTROLLER://0.0.0.0:9093",
        "advertised": "CLIENT://10.0.0.1:9092,INTERNAL://10.0.0.1:9094",
        "protocol_map": "CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL",
    }
    broker = filters.kafka_listeners("10.0.0.2", True, False, PORTS)
    assert broker["listeners"] == "CLIENT://0.0.0.0:9092,INTERNAL://0.0.0.0:9094"
    assert broker["advertised"] == combined["advertised"].replace("10.0.0.1", "10.0.0.2")
    controller = filters.kafka_listeners("10.0.0.3", False, True, PORTS)
    assert controller["listeners"] == "CONTROLLER://0.0.0.0:9093" and controller["advertised"] == ""
    assert controller["protocol_map"] == combined["protocol_map"], "the same map on every node"


def test_sasl_and_plaintext_listeners_only_when_their_port_is_set() -> None:
    both = filters.kafka_listeners("h", True, False, {**PORTS, "sasl": 9096, "plaintext": 9095})
    assert both["listeners"].endswith(",SASL://0.0.0.0:9096,PLAINTEXT://0.0.0.0:9095")
    assert both["advertised"].endswith(",SASL://h:9096,PLAINTEXT://h:9095")
    assert both["protocol_map"].endswith(",SASL:SASL_SSL,PLAINTEXT:PLAINTEXT")
    controller = filters.kafka_listeners("h", False, True, {**PORTS, "sasl": 9096})
    assert "SASL://" not in controller["listeners"] and "SASL:SASL_SSL" in controller["protocol_map"]


def _controllers(**directories: str) -> list[dict[str, object]]:
    return [
        {"inventory_hostname": h, "kafka_node": {"id": i}, "_kafka_found_directory_id": d}
        for i, (h, d) in enumerate(directories.items(), start=1)
    ]


def test_a_quorum_of_its_own_controllers_changes_nothing() -> None:
    voters = {"1": "A", "2": "B", "3": "C"}
    assert filters.kafka_voter_plan(_controllers(p1="A", p2="B", p3="C"), voters) == {"remove": [], "add": []}


def test_a_replaced_disk_takes_the_old_directory_out_before_the_new_one_joins() -> None:
    voters = {"1": "A", "2": "B", "3": "C"}
    plan = filters.kafka_voter_plan(_controllers(p1="A", p2="B", p3=""), voters)  # p3's disk is empty
    assert plan == {"remove": ["p3"], "add": ["p3"]}


def test_a_run_cut_short_is_finished_by_the_next() -> None:
    # Formatted and started, its old self still a voter: out, then in.
    assert filters.kafka_voter_plan(_controllers(p1="A", p2="B", p3="N"), {"1": "A", "2": "B", "3": "C"}) == {
        "remove": ["p3"],
        "add": ["p3"],
    }
    # Its old self removed, the new one not added yet: in.
    assert filters.kafka_voter_plan(_controllers(p1="A", p2="B", p3="N"), {"1": "A", "2": "B"}) == {
        "remove": [],
        "add": ["p3"],
    }


def test_a_new_controller_joins_and_an_unknown_quorum_changes_nothing() -> None:
    controllers = _controllers(p1="A", p2="B", p3="C", p4="")
    assert filters.kafka_voter_plan(controllers, {"1": "A", "2": "B", "3": "C"}) == {
        "remove": [],
        "add": ["p4"],
    }
    assert filters.kafka_voter_plan(controllers, None) == {"remove": [], "add": []}


def test_voters_known_by_their_id_alone_are_left_as_they_are() -> None:
    """A static quorum reports no directory ids, nor does one just converted from it: its voters
    must not look replaced (the kafka/quorum scenario's conversion removed two of three)."""
    controllers = _controllers(p1="A", p2="B", p3="C")
    assert filters.kafka_voter_plan(controllers, {"1": "", "2": "", "3": ""}) == {"remove": [], "add": []}


def test_each_device_gets_its_quota_an_override_or_none() -> None:
    quotas = load().kafka_device_quotas(["edge-1", "edge-2", "edge-3"], 16384, {"edge-2": 65536, "edge-3": 0})
    assert quotas == {"edge-1": 16384, "edge-2": 65536}
    assert load().kafka_device_quotas(["edge-1"], 0, {}) == {}
    with pytest.raises(ValueError, match="kafka_device_quota_overrides names edge-9, not a device"):
        load().kafka_device_quotas(["edge-1"], 16384, {"edge-9": 1})


def test_the_disk_guards_bounds_join_the_topics_config_and_what_a_topic_sets_wins() -> None:
    topics = [{"name": "a", "config": {"segment.bytes": "5"}}, {"name": "b"}]
    bounds = {"a": {"retention.bytes": "1", "segment.bytes": "2"}, "b": {"retention.bytes": "3"}}
    sized = filters.kafka_topics_sized(topics, bounds)
    assert sized[0]["config"] == {"retention.bytes": "1", "segment.bytes": "5"}
    assert sized[1]["config"] == {"retention.bytes": "3"}
    assert filters.kafka_topics_sized(topics, {})[1]["config"] == {}


def plan_inputs(**changes: object) -> dict[str, object]:
    """Three combined nodes, none of them formatted yet."""
    hosts = ["p1", "p2", "p3"]
    inputs: dict[str, object] = {
        "host": "p1",
        "nodes": {h: {"id": i, "address": f"10.0.0.{i}"} for i, h in enumerate(hosts, start=1)},
        "controllers": hosts,
        "serving_controllers": hosts,
        "broker": True,
        "controller": True,
        "ports": PORTS,
        "quorum": "auto",
        "quorum_found": dict.fromkeys(hosts, ""),
        "cluster_id": "",
        "cluster_ids_found": dict.fromkeys(hosts, ""),
        "directory_ids_found": dict.fromkeys(hosts, ""),
        "voter_dirs": None,
        "topics": [{"name": "t", "config": {}}],
        "disk_plan": {},
    }
    return {**inputs, **changes}


def test_a_new_cluster_plans_a_dynamic_quorum_unless_told_static() -> None:
    plan = filters.kafka_plan(plan_inputs())
    assert (plan["quorum_running"], plan["quorum_mode"], plan["cluster_exists"]) == ("", "dynamic", False)
    assert "CONTROLLER://10.0.0.1:9093" in plan["listeners"]["advertised"]
    static = filters.kafka_plan(plan_inputs(quorum="static"))
    assert static["quorum_mode"] == "static" and "CONTROLLER" not in static["listeners"]["advertised"]
    assert static["voters"] == "1@10.0.0.1:9093,2@10.0.0.2:9093,3@10.0.0.3:9093"


@pytest.mark.parametrize(
    ("found", "quorum", "running", "mode"),
    [
        ({"p1": "static", "p2": "static", "p3": "static"}, "auto", "static", "static"),
        ({"p1": "static", "p2": "static", "p3": "static"}, "dynamic", "static", "dynamic"),
        # A conversion cut short: one node already names the bootstrap servers.
        ({"p1": "static", "p2": "dynamic", "p3": "static"}, "auto", "dynamic", "dynamic"),
        ({"p1": "dynamic", "p2": "dynamic", "p3": "dynamic"}, "static", "dynamic", "dynamic"),
    ],
)
def test_a_running_quorum_keeps_its_kind_or_becomes_dynamic(
    found: dict[str, str], quorum: str, running: str, mode: str
) -> None:
    plan = filters.kafka_plan(plan_inputs(quorum_found=found, quorum=quorum))
    assert (plan["quorum_running"], plan["quorum_mode"]) == (running, mode)


def test_the_plan_names_every_cluster_id_found_and_kafka_cluster_id() -> None:
    ids = {"p1": "A" * 22, "p2": "", "p3": "B" * 22}
    plan = filters.kafka_plan(plan_inputs(cluster_ids_found=ids, cluster_id="A" * 22))
    assert plan["cluster_ids"] == ["A" * 22, "B" * 22] and plan["cluster_exists"]
    assert filters.kafka_plan(plan_inputs(cluster_id="C" * 22))["cluster_ids"] == ["C" * 22]


def test_the_voter_plan_reads_the_quorum_only_when_it_runs_dynamic() -> None:
    voters = {"1": "A", "2": "B", "3": "C"}
    found = {"p1": "A", "p2": "B", "p3": ""}
    dynamic = dict.fromkeys(["p1", "p2", "p3"], "dynamic")
    plan = filters.kafka_plan(plan_inputs(voter_dirs=voters, directory_ids_found=found, quorum_found=dynamic))
    assert plan["voter_plan"] == {"remove": ["p3"], "add": ["p3"]}
    static = dict.fromkeys(["p1", "p2", "p3"], "static")
    plan = filters.kafka_plan(plan_inputs(voter_dirs=voters, directory_ids_found=found, quorum_found=static))
    assert plan["voter_plan"] == {"remove": [], "add": []}


def test_the_plan_sizes_the_topics_and_a_dedicated_broker_has_no_controller_listener() -> None:
    bounds = {"t": {"retention.bytes": "7", "segment.bytes": "3"}}
    plan = filters.kafka_plan(plan_inputs(host="p3", controller=False, disk_plan=bounds))
    assert plan["topics"] == [{"name": "t", "config": {"retention.bytes": "7", "segment.bytes": "3"}}]
    assert "CONTROLLER" not in plan["listeners"]["listeners"]
    assert plan["listeners"]["advertised"].startswith("CLIENT://10.0.0.3:9092")


def test_a_topic_marked_absent_is_not_kept_and_one_without_a_state_is() -> None:
    topics = [{"name": "a"}, {"name": "b", "state": "absent"}, {"name": "c", "state": "present"}]
    assert [t["name"] for t in filters.kafka_kept_topics(topics)] == ["a", "c"]
