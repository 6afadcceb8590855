"""The kafka role's server.properties for both layouts, and its preflight errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import render_fixture, run_preflight

COMBINED: dict[str, object] = {
    "kafka_controller": {"hosts": {f"pi-{i}": {"ansible_host": f"127.0.0.{10 + i}"} for i in (1, 2, 3)}},
    "kafka_broker": {"hosts": {f"pi-{i}": None for i in (1, 2, 3)}},
}
DEDICATED: dict[str, object] = {
    "kafka_controller": {"hosts": {f"ctl-{i}": {"ansible_host": f"127.0.0.{10 + i}"} for i in (1, 2, 3)}},
    "kafka_broker": {"hosts": {f"brk-{i}": {"ansible_host": f"127.0.0.{20 + i}"} for i in (1, 2)}},
}


def render(
    tmp_path: Path, children: dict[str, object], extra: dict[str, object] | None = None
) -> dict[str, dict[str, str]]:
    proc = render_fixture(tmp_path, "render_kafka.yml", children, ("kafka",), extra or {})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rendered = {}
    for path in tmp_path.glob("*.properties"):
        lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
        rendered[path.stem] = dict(line.split("=", 1) for line in lines)
    return rendered


def test_combined_layout(tmp_path: Path) -> None:
    props = render(tmp_path, COMBINED, {"kafka_quorum": "static"})
    assert sorted(props) == ["pi-1", "pi-2", "pi-3"]
    one = props["pi-1"]
    assert one["process.roles"] == "broker,controller"
    assert one["node.id"] == "1"
    assert one["controller.quorum.voters"] == "1@127.0.0.11:9093,2@127.0.0.12:9093,3@127.0.0.13:9093"
    assert one["listeners"] == "CLIENT://0.0.0.0:9092,INTERNAL://0.0.0.0:9094,CONTROLLER://0.0.0.0:9093"
    assert one["advertised.listeners"] == "CLIENT://127.0.0.11:9092,INTERNAL://127.0.0.11:9094"
    assert one["listener.security.protocol.map"] == "CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL"
    assert one["ssl.keystore.type"] == "PEM" and one["ssl.truststore.type"] == "PEM"
    assert one["ssl.client.auth"] == "required"
    assert one["super.users"] == "User:pi-1;User:pi-2;User:pi-3;User:admin"
    assert one["default.replication.factor"] == "3"
    assert one["min.insync.replicas"] == "2"
    assert one["unclean.leader.election.enable"] == "false"
    assert "PLAINTEXT" not in "".join(one.values())
    assert [props[h]["node.id"] for h in ("pi-1", "pi-2", "pi-3")] == ["1", "2", "3"]


def test_dedicated_layout(tmp_path: Path) -> None:
    props = render(tmp_path, DEDICATED, {"kafka_quorum": "static"})
    controller, broker = props["ctl-2"], props["brk-1"]
    assert controller["process.roles"] == "controller"
    assert controller["listeners"] == "CONTROLLER://0.0.0.0:9093"
    assert "advertised.listeners" not in controller
    assert broker["process.roles"] == "broker"
    assert broker["node.id"] == "4"
    assert "CONTROLLER" not in broker["listeners"]
    assert broker["controller.quorum.voters"] == controller["controller.quorum.voters"]
    assert broker["inter.broker.listener.name"] == "INTERNAL"
    assert broker["default.replication.factor"] == "2"
    assert broker["min.insync.replicas"] == "1"


def test_a_new_cluster_gets_a_dynamic_quorum_unless_told_otherwise(tmp_path: Path) -> None:
    props = render(tmp_path, DEDICATED)
    controller, broker = props["ctl-2"], props["brk-1"]
    bootstrap = "127.0.0.11:9093,127.0.0.12:9093,127.0.0.13:9093"
    for node in (controller, broker):
        assert node["controller.quorum.bootstrap.servers"] == bootstrap
        assert "controller.quorum.voters" not in node
    assert controller["advertised.listeners"] == "CONTROLLER://127.0.0.12:9093"
    assert "inter.broker.listener.name" not in controller
    assert broker["inter.broker.listener.name"] == "INTERNAL"


def test_tls_policy_and_the_sasl_listener(tmp_path: Path) -> None:
    props = render(tmp_path, DEDICATED, {"kafka_sasl_port": 9095})
    broker, controller = props["brk-1"], props["ctl-1"]
    assert broker["listeners"] == "CLIENT://0.0.0.0:9092,INTERNAL://0.0.0.0:9094,SASL://0.0.0.0:9095"
    assert broker["advertised.listeners"].endswith(",SASL://127.0.0.21:9095")
    assert broker["listener.security.protocol.map"] == "CLIENT:SSL,INTERNAL:SSL,CONTROLLER:SSL,SASL:SASL_SSL"
    assert broker["listener.name.sasl.ssl.client.auth"] == "none"
    assert broker["listener.name.sasl.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert "listener.name.sasl.ssl.client.auth" not in controller
    for node in (broker, controller):
        assert node["ssl.client.auth"] == "required"
        assert node["ssl.enabled.protocols"] == "TLSv1.3,TLSv1.2"
        suites = node["ssl.cipher.suites"].split(",")
        assert suites[:3] == [
            "TLS_AES_128_GCM_SHA256",
            "TLS_AES_256_GCM_SHA384",
            "TLS_CHACHA20_POLY1305_SHA256",
        ]
        assert all("_ECDHE_" in s and ("_GCM_" in s or "CHACHA20" in s) for s in suites[3:])


def test_plaintext_only_when_asked_and_extras_win(tmp_path: Path) -> None:
    props = render(
        tmp_path,
        COMBINED,
        {"kafka_plaintext_port": 9095, "kafka_server_properties_extra": {"num.io.threads": 2}},
    )
    one = props["pi-1"]
    assert "PLAINTEXT://0.0.0.0:9095" in one["listeners"]
    assert one["listener.security.protocol.map"].endswith(",PLAINTEXT:PLAINTEXT")
    assert one["num.io.threads"] == "2"


def _kafka_preflight(tmp_path: Path, controllers: int, brokers: int, extra: dict[str, object]) -> str:
    hosts = {
        f"pi-{i}": {"ansible_host": f"127.0.0.{10 + i}"} for i in range(1, max(controllers, brokers) + 1)
    }
    inventory = tmp_path / "hosts.yml"
    children = {
        "kafka_controller": {"hosts": {h: hosts[h] for h in list(hosts)[:controllers]}},
        "kafka_broker": {"hosts": {h: hosts[h] for h in list(hosts)[:brokers]}},
    }
    inventory.write_text(
        yaml.safe_dump({"all": {"vars": {"ansible_port": 1, **extra}, "children": children}})
    )
    return run_preflight(inventory)


def test_a_consistent_kafka_inventory_passes(tmp_path: Path) -> None:
    assert _kafka_preflight(tmp_path, 3, 3, {}).startswith("OK")


@pytest.mark.parametrize(
    ("controllers", "brokers", "extra", "message"),
    [
        (2, 3, {}, "group kafka_controller less kafka_controllers_decommissioned has 2 hosts"),
        (
            3,
            3,
            {"kafka_default_replication_factor": 4},
            "kafka_default_replication_factor=4 must be at most the",
        ),
        (3, 3, {"kafka_min_insync_replicas": 3}, "kafka_min_insync_replicas=3"),
        (
            3,
            3,
            {"kafka_controllers_decommissioned": ["pi-1"], "kafka_quorum": "static"},
            "only a dynamic quorum changes its voters, and kafka_quorum is static",
        ),
        (
            3,
            3,
            {"kafka_controllers_decommissioned": ["pi-1", "pi-2"], "kafka_quorum": "dynamic"},
            "pi-1, pi-2 not a dedicated controller",
        ),
        (3, 3, {"kafka_node_id": 7}, "kafka_node_id is not unique"),
        (3, 3, {"kafka_internal_port": 9092}, "must differ"),
        (3, 3, {"kafka_heap_mb": "lots"}, "kafka_heap_mb"),
        (
            3,
            3,
            {"kafka_scram_users": [{"name": "dash"}]},
            "kafka_scram_users (['dash']) needs kafka_sasl_port > 0",
        ),
        (3, 3, {"kafka_sasl_port": 9092}, "must differ"),
        (
            3,
            3,
            {
                "kafka_sasl_port": 9095,
                "kafka_scram_users": [{"name": "dash", "password": "has,a-comma-in-it"}],
            },
            "the password of dash is shorter than 12 characters or holds a comma",
        ),
        (
            3,
            2,
            {
                "kafka_default_replication_factor": 2,
                "kafka_topics": [{"name": "big", "partitions": 1, "replication_factor": 3}],
            },
            "topic big asks replication_factor=3",
        ),
        (
            3,
            3,
            {
                "kafka_topics": [
                    {"name": "sensor-latest", "partitions": 1, "replication_factor": 3, "state": "absent"}
                ]
            },
            "kafka_topics marks sensor-latest state: absent, and the pipeline reads or writes it",
        ),
        (
            3,
            3,
            {"kafka_topics": [{"name": "old", "partitions": 1, "replication_factor": 3, "state": "gone"}]},
            "value of state must be one of: present, absent, got: gone found in kafka_topics",
        ),
    ],
)
def test_kafka_inventory_errors_name_the_variable(
    tmp_path: Path, controllers: int, brokers: int, extra: dict[str, object], message: str
) -> None:
    out = _kafka_preflight(tmp_path, controllers, brokers, extra)
    assert not out.startswith("OK")
    assert message in out
