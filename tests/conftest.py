"""Shared test helpers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from ansible.plugins.loader import init_plugin_loader
from pikit_testkit.modules import from_file

from pikit import REPO

# The tests import the pikit.cluster collection's modules (ansible_collections.pikit.cluster) as
# Ansible does, through its collection loader: imported as a plain namespace package first, it
# would leave ansible-galaxy's collection listing (which Mitogen's planner calls) unable to read it.
init_plugin_loader()


def load_filter_plugin(role: str, module: str) -> ModuleType:
    """A role's filter plugin module, loaded from its file as Ansible loads it."""
    return from_file(module, REPO / "roles" / role / "filter_plugins" / f"{module}.py")


# The playbooks of the unit tests never leave the controller; they run with the kit's own strategy
# (ansible.cfg), which answers most of a preflight's host-tasks without a worker (a preflight on
# two hosts: 5.5 s, with Ansible's linear strategy 9.5 s).
CONTROLLER_ONLY = {
    "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
    "ANSIBLE_NOCOLOR": "1",
}


def without_sudo(folder: Path) -> tuple[dict[str, str], Path]:
    """An environment whose PATH finds, before any real one, a `sudo` that refuses and records
    each call in the returned log: a controller where nothing may need sudo."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "sudo-calls.log"
    shim = folder / "sudo"
    refuse = 'echo "sudo: this controller has no sudo (pikit test)" >&2'
    shim.write_text(f'#!/bin/sh\necho "sudo $*" >> {log}\n{refuse}\nexit 1\n')
    shim.chmod(0o755)
    return {"PATH": f"{folder}:{REPO / '.venv/bin'}:{os.environ['PATH']}"}, log


def run_playbook(
    inventory: Path, playbook: str, *extra: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """playbooks/<playbook> on `inventory`, as make runs it, with `extra` arguments and `env` over
    the usual environment: its exit code and its output. The controller's state (the site model
    the preflight writes) goes beside the inventory unless the inventory says where."""
    env = {**os.environ, **CONTROLLER_ONLY, "PIKIT_STATE_DIR": str(inventory.parent / "state"), **(env or {})}
    argv: list[str | Path] = [
        REPO / ".venv/bin/ansible-playbook",
        "-i",
        inventory,
        REPO / "playbooks" / playbook,
        *extra,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def render_fixture(
    tmp_path: Path, playbook: str, children: dict[str, Any], roles: tuple[str, ...], extra: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """tests/unit/fixtures/<playbook> on an inventory of `children`, its files rendered into
    `tmp_path`, with `extra` as extra vars: include_vars (the roles' defaults) outranks inventory
    vars. The roles' vars call their filters, so outside a play of a role say where they are."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": children}}))
    filters = os.pathsep.join(str(REPO / "roles" / role / "filter_plugins") for role in roles)
    env = {**os.environ, **CONTROLLER_ONLY, "ANSIBLE_FILTER_PLUGINS": filters}
    argv = [REPO / ".venv/bin/ansible-playbook", "-i", inventory, REPO / "tests/unit/fixtures" / playbook]
    argv += ["-e", f"out_dir={tmp_path}", "-e", f"pikit_state_dir={tmp_path}/state", "-e", json.dumps(extra)]
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, check=False)


def run_on_controller(playbook: Path, *extra_vars: str) -> subprocess.CompletedProcess[str]:
    """A playbook whose plays target the controller (localhost), run from the kit's checkout
    with the venv's Python, each of `extra_vars` passed with -e."""
    env = {**os.environ, **CONTROLLER_ONLY}
    argv = [str(REPO / ".venv/bin/ansible-playbook"), "-i", "localhost,", str(playbook)]
    for variables in (*extra_vars, f"ansible_python_interpreter={REPO / '.venv/bin/python'}"):
        argv += ["-e", variables]
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=REPO)


def run_preflight(inventory: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    """playbooks/preflight.yml on `inventory`: its output, prefixed "OK" when it passed.

    It must never connect to a host: an UNREACHABLE in the output fails the test.
    """
    code, out = run_playbook(inventory, "preflight.yml", *extra, env=env)
    assert "UNREACHABLE" not in out, "preflight must not connect to any host"
    return out if code else "OK\n" + out


def inventory_of(
    groups: dict[str, list[str]], hostvars: dict[str, dict[str, Any]], **site: Any
) -> dict[str, Any]:
    """An Ansible YAML inventory: the hosts of `groups`, each with its `hostvars`, and `site` as the
    variables of group all."""
    children: dict[str, Any] = {}
    placed: set[str] = set()
    for group, hosts in groups.items():
        members: dict[str, Any] = {}
        for host in hosts:
            members[host] = None if host in placed else (hostvars.get(host) or None)
            placed.add(host)
        children[group] = {"hosts": members}
    return {"all": {"vars": site, "children": children}}


def preflight_site_model(tmp_path: Path, inventory: dict[str, Any]) -> dict[str, Any]:
    """The site model that playbooks/preflight.yml builds for `inventory`: its site.json, as the
    roles tell Ansible what each host serves."""
    state = tmp_path / "state"
    inventory["all"].setdefault("vars", {})["pikit_state_dir"] = str(state)
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    out = run_preflight(path)
    assert out.startswith("OK"), out[-3000:]
    model: dict[str, Any] = json.loads((state / "site.json").read_text())
    return model
