"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_preflight(inventory: Path) -> str:
    """playbooks/preflight.yml on `inventory`: its output, prefixed "OK" when it passed.

    It must never connect to a host: an UNREACHABLE in the output fails the test.
    """
    import os
    import subprocess

    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [REPO / ".venv/bin/ansible-playbook", "-i", inventory, REPO / "playbooks/preflight.yml"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert "UNREACHABLE" not in out, "preflight must not connect to any host"
    return out if proc.returncode else "OK\n" + out
