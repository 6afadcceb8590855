"""plugins/strategy/mitogen_linear.py: what the controller loads once, before it forks workers,
and the host-tasks it answers without one.

Both reach into Ansible's and Mitogen's internals (pinned in requirements.txt). An upgrade that
renames them must fail here, not quietly make every converge slower again; one that changes what a
worker answers must show here as a difference from Ansible's own linear strategy."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import ansible.collections.list
import ansible_mitogen.planner
import pytest
from ansible.plugins.loader import filter_loader, test_loader
from pikit_testkit.modules import from_file

from pikit import REPO


def load() -> ModuleType:
    return from_file("mitogen_linear", REPO / "plugins/strategy/mitogen_linear.py")


def test_the_warm_up_fills_the_jinja_plugin_caches_every_worker_inherits() -> None:
    strategy = load()
    strategy.warm_before_fork()

    for loader in (filter_loader, test_loader):
        cached = loader._cached_non_collection_wrappers
        assert cached, f"{loader.type}: nothing cached before the first fork"
    assert "ansible.builtin.to_json" in filter_loader._cached_non_collection_wrappers
    assert "ansible.builtin.version" in test_loader._cached_non_collection_wrappers


def test_mitogen_takes_the_collections_listed_once() -> None:
    strategy = load()
    original = ansible_mitogen.planner._load_collections
    assert "_load_collections" in ansible_mitogen.planner.invoke.__code__.co_names, (
        "Mitogen's invoke() no longer calls _load_collections: the patch would do nothing"
    )
    try:
        strategy.warm_before_fork()
        assert ansible_mitogen.planner._load_collections is strategy._load_collections

        mine = SimpleNamespace(_extra_sys_paths=set())
        theirs = SimpleNamespace(_extra_sys_paths=set())
        strategy._load_collections(mine)
        original(theirs)
        assert mine._extra_sys_paths == theirs._extra_sys_paths
        assert mine._extra_sys_paths == {p.decode() for p in ansible.collections.list.list_collection_dirs()}
        assert any(p.endswith("community/crypto") for p in mine._extra_sys_paths)
    finally:
        ansible_mitogen.planner._load_collections = original


PLAYS = REPO / "tests/unit/fixtures/strategy"
VOLATILE = {"start", "end", "delta", "duration", "id", "path", "invocation"}


def run(strategy: str, playbook: str, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """The play on two local hosts with `strategy`: its exit code, and each task's result per host."""
    inventory = tmp_path / "hosts"
    inventory.write_text(
        "[all]\nh1 colour=red\nh2 colour=blue\n[all:vars]\nansible_connection=local\n"
        f"ansible_python_interpreter={REPO / '.venv/bin/python'}\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STRATEGY": strategy,
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json",
    }
    argv = [str(REPO / ".venv/bin/ansible-playbook"), "-i", str(inventory), str(PLAYS / playbook)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=300)
    report = json.loads(proc.stdout)
    tasks: dict[str, Any] = {}
    # Ansible's linear strategy reports a task once for all hosts, any other once per host.
    for play in report["plays"]:
        for task in play["tasks"]:
            tasks.setdefault(task["task"]["name"], {}).update(stable(task["hosts"]))
    return proc.returncode, {"tasks": tasks, "stats": report["stats"]}


def stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


@pytest.mark.parametrize("playbook", ["play.yml", "fatal.yml"])
def test_every_host_gets_what_a_worker_would_have_answered(playbook: str, tmp_path: Path) -> None:
    linear_code, linear = run("linear", playbook, tmp_path)
    kit_code, kit = run("mitogen_linear", playbook, tmp_path)

    assert kit_code == linear_code
    assert list(kit["tasks"]) == list(linear["tasks"])
    for name, hosts in linear["tasks"].items():
        assert kit["tasks"][name] == hosts, name
    assert kit["stats"] == linear["stats"]
    if playbook == "play.yml":
        assert linear_code == 0
        assert linear["tasks"]["A command on one host only"]["h2"]["skipped"] is True
        assert linear["tasks"]["A secret kept out of the output"]["h1"]["censored"]
        assert "s3cr3t" not in json.dumps(kit["tasks"]["A secret kept out of the output"])
    else:
        assert linear_code != 0
        assert linear["tasks"]["An assertion that fails on one host"]["h2"]["msg"] == "h2 is blue"
        assert "Never reached" not in kit["tasks"]


def test_the_controller_answers_only_plain_tasks_that_never_touch_the_host() -> None:
    strategy = load()
    plain: dict[str, Any] = {
        "loop": None,
        "loop_with": None,
        "delegate_to": None,
        "until": [],
        "timeout": 0,
        "async_val": 0,
    }

    def task(action: str, **changed: Any) -> SimpleNamespace:
        return SimpleNamespace(action=action, **{**plain, **changed})

    assert strategy.runs_in_controller(task("ansible.builtin.set_fact"))
    assert strategy.runs_in_controller(task("assert"))
    assert not strategy.runs_in_controller(task("ansible.builtin.command"))
    assert not strategy.runs_in_controller(task("ansible.builtin.template"))
    assert not strategy.runs_in_controller(task("set_fact", loop=[1, 2]))
    assert not strategy.runs_in_controller(task("set_fact", delegate_to="pi-1"))
    assert not strategy.runs_in_controller(task("assert", until=["x"]))
    assert not strategy.runs_in_controller(task("debug", timeout=5))
