"""Shared test helpers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import ModuleType

from pikit import REPO
from pikit.modules import from_file


def load_filter_plugin(role: str, module: str) -> ModuleType:
    """A role's filter plugin module, loaded from its file as Ansible loads it."""
    return from_file(module, REPO / "roles" / role / "filter_plugins" / f"{module}.py")


# The playbooks of the unit tests never leave the controller: there Mitogen, the kit's strategy
# for reaching nodes (ansible.cfg), costs more to start than it saves (a preflight run: 7.3 s with
# it, 5.4 s without).
CONTROLLER_ONLY = {
    "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_STRATEGY": "linear",
}


def run_playbook(inventory: Path, playbook: str) -> tuple[int, str]:
    """playbooks/<playbook> on `inventory`, as make runs it: its exit code and its output."""
    env = {**os.environ, **CONTROLLER_ONLY}
    argv: list[str | Path] = [
        REPO / ".venv/bin/ansible-playbook",
        "-i",
        inventory,
        REPO / "playbooks" / playbook,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def run_on_controller(playbook: Path, *extra_vars: str) -> subprocess.CompletedProcess[str]:
    """A playbook whose plays target the controller (localhost), run from the kit's checkout
    with the venv's Python, each of `extra_vars` passed with -e."""
    env = {**os.environ, **CONTROLLER_ONLY}
    argv = [str(REPO / ".venv/bin/ansible-playbook"), "-i", "localhost,", str(playbook)]
    for variables in (*extra_vars, f"ansible_python_interpreter={REPO / '.venv/bin/python'}"):
        argv += ["-e", variables]
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=REPO)


def run_preflight(inventory: Path) -> str:
    """playbooks/preflight.yml on `inventory`: its output, prefixed "OK" when it passed.

    It must never connect to a host: an UNREACHABLE in the output fails the test.
    """
    code, out = run_playbook(inventory, "preflight.yml")
    assert "UNREACHABLE" not in out, "preflight must not connect to any host"
    return out if code else "OK\n" + out
