"""The preflight names an inventory's mistakes the way a person makes them: a misspelled kit
variable (in host vars, group vars or `-e`) and two hosts on one address; and it runs on a
controller that has no sudo, under the kit's strategy and Ansible's own, on copies of both
example inventories."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from pikit_dev import lab_image
from pikit_testkit.modules import from_file

from pikit import REPO
from tests.conftest import run_preflight, without_sudo

# The lab's addresses, which the copies of the example inventories take (their hosts are not
# reached: the preflight touches no host).
LAB_PREFIX = "10.89.77."


def names() -> ModuleType:
    path = REPO / "roles/pikit/action_plugins/pikit_inventory_names.py"
    return from_file("pikit_inventory_names", path, register=True)


def test_an_undeclared_kit_name_is_named_with_its_hosts_and_nearest_declared_name() -> None:
    found = names().undeclared(
        {
            "pi-1": ["kafka_replication_factr", "ansible_host", "my_own_var", "kafka_heap_mb"],
            "pi-2": ["kafka_replication_factr", "spark_wokrer_cores"],
            "pi-3": ["pikit_renamed_thing"],
        },
        {"kafka_default_replication_factor", "kafka_heap_mb", "spark_worker_cores"},
        known=["pikit_renamed_thing"],
    )
    assert [(f.name, f.hosts, f.nearest) for f in found] == [
        ("kafka_replication_factr", ("pi-1", "pi-2"), "kafka_default_replication_factor"),
        ("spark_wokrer_cores", ("pi-2",), "spark_worker_cores"),
    ]
    assert found[0].message(every_host=2) == (
        "kafka_replication_factr (set for every host) is declared by no role of the kit: "
        "did you mean `kafka_default_replication_factor`?"
    )
    assert "no declared name is near it" in names().Undeclared("pki_zzz", ("pi-1",), None).message(3)


def test_every_role_default_is_declared_so_setting_one_never_warns() -> None:
    declared = names().declared_names(REPO / "roles")
    for defaults in sorted(REPO.glob("roles/*/defaults/main.yml")):
        undeclared = set(yaml.safe_load(defaults.read_text()) or {}) - declared
        assert not undeclared, f"{defaults}: {sorted(undeclared)}"


def _inventory(tmp_path: Path) -> Path:
    inventory = {
        "all": {
            "vars": {"ansible_port": 1, "pikit_state_dir": str(tmp_path / "state"), "kafka_heap_mbb": 256},
            "children": {
                "other": {
                    "hosts": {
                        "pi-1": {"ansible_host": "127.0.0.11", "spark_worker_corse": 2},
                        "pi-2": {"ansible_host": "127.0.0.12"},
                    }
                }
            },
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def test_a_typo_in_host_vars_group_vars_or_extra_vars_is_a_warning_that_names_it(tmp_path: Path) -> None:
    out = run_preflight(_inventory(tmp_path), "-e", "pikit_clustr_name=x")
    assert out.startswith("OK"), out[-3000:]
    warnings = " ".join(re.findall(r"\[WARNING\]: (.*?) is declared by no role", out.replace("\n", " ")))
    assert "kafka_heap_mbb (set for every host)" in warnings  # group vars
    assert "spark_worker_corse (set for pi-1)" in warnings  # host vars
    assert "pikit_clustr_name (set for every host)" in warnings  # -e
    assert "did you mean `kafka_heap_mb`?" in out
    assert "did you mean `spark_worker_cores`?" in out
    assert "did you mean `pikit_cluster_name`?" in out


def test_a_typo_fails_the_preflight_when_strict(tmp_path: Path) -> None:
    out = run_preflight(_inventory(tmp_path), "-e", "pikit_inventory_strict=true")
    assert not out.startswith("OK")
    assert "spark_worker_corse (set for pi-1) is declared by no role of the kit" in out
    assert "(pikit_inventory_strict is on)" in out


def test_the_lab_inventory_is_strict_and_shaped_like_the_examples() -> None:
    """Same groups and the same variables as inventory/example: only addresses, sizes and the
    lab's own settings differ."""
    lab = yaml.safe_load((REPO / "inventory/lab/group_vars/all.yml").read_text())
    example = yaml.safe_load((REPO / "inventory/example/group_vars/all.yml").read_text())
    assert lab["pikit_inventory_strict"] is True
    assert {name: lab.get(name) for name in example} == example
    assert lab["ansible_user"] == lab_image.LAB_USER != "root"  # the user the lab's image makes

    def groups(path: Path) -> set[str]:
        return set(yaml.safe_load(path.read_text())["all"]["children"])

    assert groups(REPO / "inventory/lab/hosts.yml") == groups(REPO / "inventory/example/hosts.yml")


@pytest.mark.parametrize("strategy", ["mitogen_linear", "linear"])
@pytest.mark.parametrize("example", ["example", "example-dedicated"])
def test_the_example_inventories_pass_the_preflight_on_a_controller_without_sudo(
    tmp_path: Path, example: str, strategy: str
) -> None:
    """A copy of the example, addressed to the lab, as a user makes one; a sudo that refuses
    first on PATH: every task on the controller runs as the operator, with no become."""
    copy = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / example, copy)
    hosts = copy / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("192.168.1.", LAB_PREFIX))
    env, sudo_log = without_sudo(tmp_path / "bin")
    out = run_preflight(
        copy,
        "-e",
        "pikit_inventory_strict=true",
        env={**env, "ANSIBLE_STRATEGY": strategy, "PIKIT_STATE_DIR": str(tmp_path / "state")},
    )
    assert out.startswith("OK"), out[-3000:]
    assert not sudo_log.exists(), sudo_log.read_text()
    assert LAB_PREFIX in (tmp_path / "state/site.json").read_text()
    # Once per run, after every role's validation told what its hosts serve (issue 67).
    assert out.count("TASK [pikit : Build the site model") == 1, "the site model is built once"
