"""A broken inventory fails in preflight, naming the variable, before any host is touched.

Hosts sit on loopback addresses with an SSH port nothing listens on: had the
preflight connected anywhere, the run would say UNREACHABLE.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import run_preflight


def preflight(
    tmp_path: Path,
    group_vars: dict[str, object],
    hosts: dict[str, dict[str, object]] | None = None,
    group: str = "other",
) -> str:
    hosts = hosts or {"pi-1": {"ansible_host": "127.0.0.11"}, "pi-2": {"ansible_host": "127.0.0.12"}}
    inventory = {
        "all": {
            "vars": {"ansible_port": 1, "pikit_state_dir": str(tmp_path / "state"), **group_vars},
            "children": {group: {"hosts": hosts}},
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return run_preflight(path)


def test_a_consistent_inventory_passes(tmp_path: Path) -> None:
    assert preflight(tmp_path, {}).startswith("OK")


@pytest.mark.parametrize(
    ("group_vars", "named"),
    [
        ({"common_nofile_limit": "lots"}, "common_nofile_limit"),
        ({"pikit_data_root": "srv/data"}, "pikit_data_root"),
        ({"common_sysctl_apply": "sometimes"}, "common_sysctl_apply"),
        ({"common_service_users": [{"groups": ["edge"]}]}, "name"),
        (
            {"common_ssh_allow_users": ["alice"], "ansible_user": "pi"},
            "common_ssh_allow_users on pi-1 (alice) leaves out pi",
        ),
        ({"firewall_enabled": "sometimes"}, "firewall_enabled"),
        ({"firewall_admin_sources": ["laptop.lan"]}, "firewall_admin_sources"),
        # The address comes from the inventory alone (pikit_address), before any site model.
        (
            {"pi_base_static_address": "10.9.9.9/24"},
            "the address Ansible reaches the host at (127.0.0.11), got '10.9.9.9/24'",
        ),
        (
            {"pikit_edge_group": "sensors"},
            "pikit_edge_group is no longer read: the kit's groups have fixed names",
        ),
    ],
)
def test_a_bad_variable_is_named(tmp_path: Path, group_vars: dict[str, object], named: str) -> None:
    out = preflight(tmp_path, group_vars)
    assert not out.startswith("OK")
    assert named in out


def test_a_bad_monitoring_job_is_named(tmp_path: Path) -> None:
    jobs = [{"name": "mine", "groups": ["all"], "port": 9999, "ports": [9998]}]
    out = preflight(tmp_path, {"monitoring_jobs": jobs}, group="monitoring")
    assert "job 'mine' must set exactly one of" in out


def test_a_host_without_an_ip_is_named(tmp_path: Path) -> None:
    out = preflight(
        tmp_path,
        {},
        {"pi-1": {"ansible_host": "127.0.0.11"}, "pi-2": {"ansible_host": "pi-two.local"}},
    )
    assert "host pi-2: neither node_ip nor ansible_host is an IPv4 address" in out


def test_duplicate_addresses_are_refused(tmp_path: Path) -> None:
    out = preflight(
        tmp_path,
        {},
        {"pi-1": {"ansible_host": "127.0.0.11"}, "pi-2": {"ansible_host": "127.0.0.11"}},
    )
    assert "share an address: pi-1, pi-2 share 127.0.0.11" in out


def test_an_edge_device_without_brokers_is_named(tmp_path: Path) -> None:
    inventory = tmp_path / "edge.yml"
    inventory.write_text(
        yaml.safe_dump({"all": {"children": {"edge": {"hosts": {"e-1": {"ansible_host": "127.0.0.9"}}}}}})
    )
    out = run_preflight(inventory)
    assert not out.startswith("OK")
    assert "edge_agent_bootstrap_servers is empty on e-1" in out


def spark_preflight(tmp_path: Path, masters: list[str], group_vars: dict[str, object]) -> str:
    """A small Kafka + Spark inventory on loopback addresses."""
    address = {f"pi-{n}": {"ansible_host": f"127.0.0.{10 + n}"} for n in range(1, 5)}
    inventory = {
        "all": {
            "vars": {
                "ansible_port": 1,
                "kafka_disk_bytes": 32 * 2**30,
                **group_vars,
            },
            "children": {
                "kafka_controller": {"hosts": {"pi-1": address["pi-1"]}},
                "kafka_broker": {"hosts": {"pi-1": None}},
                "spark_master": {"hosts": {m: address[m] for m in masters}},
                "spark_worker": {"hosts": {"pi-2": address["pi-2"], "pi-3": address["pi-3"]}},
            },
        }
    }
    path = tmp_path / "spark.yml"
    path.write_text(yaml.safe_dump(inventory))
    return run_preflight(path)


def test_a_consistent_spark_inventory_passes(tmp_path: Path) -> None:
    assert spark_preflight(tmp_path, ["pi-4"], {}).startswith("OK")


@pytest.mark.parametrize(
    ("masters", "group_vars", "named"),
    [
        (["pi-4", "pi-1"], {}, "group spark_master has 2 hosts"),
        (["pi-4"], {"spark_executor_memory_mb": 400}, "spark_executor_memory_mb=400 is below the ~450 MB"),
        (["pi-4"], {"spark_worker_memory_mb": 800}, "spark_worker_memory_mb=800 is below"),
        (["pi-4"], {"spark_site_apps": ["daily_rollup"]}, "spark_site_apps names daily_rollup"),
        (
            ["pi-4"],
            {"spark_rollup_days": 2, "spark_late_horizon_seconds": 90000},
            "spark_rollup_days=2 would leave dates that sensor_aggregates may still write to",
        ),
        (["pi-4"], {"spark_workers_decommissioned": ["pi-1"]}, "['pi-1']: pi-1 not in group spark_worker"),
        (["pi-4"], {"spark_workers_decommissioned": ["pi-2", "pi-3"]}, "every worker would leave"),
        (["pi-4"], {"kafka_brokers_decommissioned": ["pi-1"]}, "pi-1 is not a dedicated broker"),
        (
            ["pi-4"],
            {"kafka_disk_bytes": 16 * 2**20},
            "topic sensor-readings gets 1,157,049 bytes per partition, fewer than two segments of 1,048,576"
            " bytes, on pi-1, whose data disk holds 16,777,216 bytes of which kafka_disk_share=0.5",
        ),
    ],
)
def test_a_bad_spark_setting_is_named(
    tmp_path: Path, masters: list[str], group_vars: dict[str, object], named: str
) -> None:
    out = spark_preflight(tmp_path, masters, group_vars)
    assert not out.startswith("OK")
    assert named in out


def test_a_name_the_site_wide_variables_replaced_is_refused_with_its_new_name(tmp_path: Path) -> None:
    out = preflight(tmp_path, {"kafka_readings_topic": "readings"})
    assert not out.startswith("OK")
    assert "kafka_readings_topic is now pikit_readings_topic" in out
    assert "host pi-1" in out


@pytest.mark.parametrize(
    ("group_vars", "named"),
    [
        (
            {"connect_mirror": {"site": "green.house", "core_bootstrap": ["core-1:9092"]}},
            "connect_mirror on pi-2 needs `site`",
        ),
        ({"connect_mirror": {"site": "greenhouse"}}, "connect_mirror on pi-2 needs `site`"),
        ({"connect_mirror": "greenhouse"}, "connect_mirror"),
        ({"kafka_mirror_sites": ["greenhouse", "greenhouse"]}, "kafka_mirror_sites on pi-1"),
        ({"kafka_mirror_sites": ["a.b"]}, "kafka_mirror_sites on pi-1"),
        (
            {
                "connect_mirror": {"site": "greenhouse", "core_bootstrap": ["core-1:9092"]},
                "pikit_uplink_outage_hours": 24 * 31,
            },
            "keep their records less than pikit_uplink_outage_hours=744",
        ),
    ],
)
def test_a_mirror_that_would_write_past_its_prefix_is_named(
    tmp_path: Path, group_vars: dict[str, object], named: str
) -> None:
    inventory = {
        "all": {
            "vars": {"ansible_port": 1, "pikit_state_dir": str(tmp_path / "state"), **group_vars},
            "children": {
                "kafka_controller": {"hosts": {"pi-1": {"ansible_host": "127.0.0.11"}}},
                "kafka_broker": {"hosts": {"pi-1": None}},
                "kafka_connect": {"hosts": {"pi-2": {"ansible_host": "127.0.0.12"}}},
            },
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    out = run_preflight(path)
    assert not out.startswith("OK") and named in out, out[-2000:]
