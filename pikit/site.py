"""A site as the controller's tools see it: the inventory's hosts and groups, and the few settings
they need, with the roles' defaults beneath the inventory's values (as Ansible layers them).

The inventory is read with `ansible-inventory --list`. A value that is a Jinja template is
rendered by Ansible itself (`ansible -m debug`), so what the tools use is what the playbooks use.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pikit import REPO
from pikit.service_ports import role_defaults

VENV_BIN = REPO / ".venv/bin"


class SiteError(ValueError):
    """The inventory cannot be read, or lacks what a tool needs; the message names it."""


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


@dataclass
class Site:
    inventory: Path
    groups: dict[str, list[str]]
    hostvars: dict[str, dict[str, Any]]

    @classmethod
    def load(cls, inventory: Path) -> Site:
        run = subprocess.run(
            [VENV_BIN / "ansible-inventory", "-i", inventory, "--list"],
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            raise SiteError(f"ansible-inventory could not read {inventory}: {run.stderr.strip()[-500:]}")
        listing = json.loads(run.stdout)
        hostvars = listing.get("_meta", {}).get("hostvars", {})
        groups: dict[str, list[str]] = {}

        def hosts_of(group: str) -> list[str]:
            entry = listing.get(group, {})
            found = list(entry.get("hosts", []))
            for child in entry.get("children", []):
                found += [h for h in hosts_of(child) if h not in found]
            return found

        for group in listing:
            if group != "_meta":
                groups[group] = hosts_of(group)
        return cls(inventory, groups, {h: dict(v) for h, v in hostvars.items()})

    def hosts(self, group: str) -> list[str]:
        return list(self.groups.get(group, []))

    def address(self, host: str) -> str:
        """Where the controller reaches a host: node_ip, else ansible_host, else its name."""
        for name in ("node_ip", "ansible_host"):
            value = self.hostvars.get(host, {}).get(name)
            if value:
                return str(self.render(host, name) if _is_template(value) else value)
        return host

    def setting(self, name: str, role: str, host: str | None = None) -> Any:
        """A variable as a play on `host` (default: the first host) sees it: the inventory's value,
        else the role's default; a template is rendered by Ansible."""
        host = host or next(iter(self.hostvars), "localhost")
        if name in self.hostvars.get(host, {}):
            value = self.hostvars[host][name]
            return self.render(host, name) if _is_template(value) else value
        defaults = role_defaults(REPO, [role])[role]
        if name not in defaults:
            raise SiteError(f"{name} is neither in the inventory nor a default of roles/{role}")
        value = defaults[name]
        if _is_template(value):
            raise SiteError(
                f"{name} comes from a templated default of roles/{role} ({value!r}): set it in the "
                f"inventory ({self.inventory}) for the controller's tools to read"
            )
        return value

    def render(self, host: str, name: str) -> Any:
        run = subprocess.run(
            [
                VENV_BIN / "ansible",
                host,
                "-i",
                self.inventory,
                "-o",
                "-m",
                "ansible.builtin.debug",
                "-a",
                f"var={name}",
            ],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
        )
        _, _, result = run.stdout.partition(" => ")
        try:
            return json.loads(result)[name]
        except (ValueError, KeyError) as exc:
            raise SiteError(
                f"Ansible could not render {name} for {host}: {run.stdout[-300:]}{run.stderr[-300:]}"
            ) from exc

    @cached_property
    def state_dir(self) -> Path:
        """The controller's state of this site (CA, issued certificates): PIKIT_STATE_DIR, else the
        inventory's pikit_state_dir, else roles/pikit's default (~/.local/share/pikit/<cluster>)."""
        if os.environ.get("PIKIT_STATE_DIR"):
            return Path(os.environ["PIKIT_STATE_DIR"])
        host = next(iter(self.hostvars), None)
        if host and "pikit_state_dir" in self.hostvars[host]:
            return Path(str(self.setting("pikit_state_dir", "pikit", host)))
        cluster = self.hostvars.get(host or "", {}).get("pikit_cluster_name", "pikit")
        return Path.home() / ".local/share/pikit" / str(cluster)
