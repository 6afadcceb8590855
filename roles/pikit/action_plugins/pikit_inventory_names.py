"""Name the inventory's variables that carry a kit role's prefix but that no role declares.

Ansible ignores a variable nobody reads, so `kafka_replication_factr: 3` passes silently and the
site runs with the default. The preflight runs this once, on the controller, before any host is
touched: every variable of every host (host vars, group vars, `-e`) whose name starts with a kit
role's prefix must be an option of some role's `meta/argument_specs.yml`. Each one that is not is
a warning naming the hosts it is set for and the nearest declared name; with `strict` the run
fails instead (for CI).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ansible.plugins.action import ActionBase

PREFIXES = (
    "kafka_",
    "spark_",
    "pikit_",
    "edge_agent_",
    "connect_",
    "monitoring_",
    "firewall_",
    "pi_base_",
    "common_",
    "pki_",
)


@dataclass(frozen=True)
class Undeclared:
    name: str
    hosts: tuple[str, ...]
    nearest: str | None

    def message(self, every_host: int) -> str:
        where = "every host" if len(self.hosts) == every_host else ", ".join(self.hosts)
        hint = f"did you mean `{self.nearest}`?" if self.nearest else "no declared name is near it"
        return f"{self.name} (set for {where}) is declared by no role of the kit: {hint}"


def declared_names(roles_dir: Path) -> set[str]:
    """Every option of every entry point of every role's meta/argument_specs.yml."""
    names: set[str] = set()
    for spec in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(spec.read_text()) or {}).get("argument_specs", {}).values():
            names.update((entry or {}).get("options") or {})
    return names


def undeclared(
    names_by_host: Mapping[str, Iterable[str]], declared: set[str], known: Iterable[str] = ()
) -> list[Undeclared]:
    """The kit-prefixed names that are neither declared nor `known` (refused with a reason of
    their own elsewhere), each with the hosts that set it and its nearest declared name."""
    skip = declared | set(known)
    hosts_of: dict[str, list[str]] = {}
    for host, names in names_by_host.items():
        for name in names:
            if name.startswith(PREFIXES) and name not in skip:
                hosts_of.setdefault(name, []).append(host)
    candidates = sorted(declared)
    return [
        Undeclared(
            name, tuple(hosts), next(iter(difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)), None)
        )
        for name, hosts in sorted(hosts_of.items())
    ]


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type information
    """Args: `hosts` (the play's hosts), `strict` (fail instead of warn), `known` (names refused
    elsewhere). Reads the hosts' variables from hostvars: what the inventory and `-e` set."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        hostvars = task_vars["hostvars"]
        names = {host: list(hostvars[host]) for host in args["hosts"]}
        roles_dir = Path(self._task._role._role_path).parent
        found = undeclared(names, declared_names(roles_dir), args.get("known", ()))
        messages = [finding.message(len(names)) for finding in found]
        result.update(changed=False, undeclared=[finding.name for finding in found])
        if messages and args.get("strict"):
            result.update(failed=True, msg="; ".join(messages) + " (pikit_inventory_strict is on)")
        elif messages:
            result["warnings"] = messages
        return result
