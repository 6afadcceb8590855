"""A site as the controller's tools see it: the site model (pikit/site_model.py) that the
preflight of every playbook run writes to `<pikit_state_dir>/site.json`, with Ansible's own view
of the inventory, the roles' defaults and `-e`. The tools never read a role's defaults.

The inventory itself is read only to find the state directory (`ansible-inventory --list`, a
templated `pikit_state_dir` rendered by Ansible).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pikit import REPO
from pikit.site_model import SiteModelError, service_addresses, service_endpoints, service_ports

VENV_BIN = REPO / ".venv/bin"


class SiteError(ValueError):
    """The inventory or its site model cannot be read, or lacks what a tool needs; the message
    names it."""


@contextmanager
def _as_site_error() -> Iterator[None]:
    try:
        yield
    except SiteModelError as exc:
        raise SiteError(str(exc)) from None


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def state_dir_cache() -> Path:
    """Where each inventory's state directory is kept between calls of the controller's tools."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pikit" / "state-dirs.json"


def _inventory_stamp(inventory: Path) -> float:
    """The newest change among the inventory's files and roles/pikit's defaults, where
    pikit_state_dir's default lives."""
    files = [REPO / "roles/pikit/defaults/main.yml", inventory]
    if inventory.is_dir():
        files += [path for path in inventory.rglob("*") if path.is_file()]
    return max((path.stat().st_mtime for path in files if path.exists()), default=0.0)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@dataclass
class Site:
    inventory: Path
    hostvars: dict[str, dict[str, Any]] | None = None
    model: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, inventory: Path) -> Site:
        """The inventory's site, with the model its last playbook run wrote."""
        site = cls(inventory)
        path = site.state_dir / "site.json"
        try:
            site.model = json.loads(path.read_text())
        except FileNotFoundError:
            raise SiteError(
                f"no site model at {path}: run `ansible-playbook -i {inventory} playbooks/preflight.yml` "
                "(every playbook of the kit writes it)"
            ) from None
        return site

    def inventory_hostvars(self) -> dict[str, dict[str, Any]]:
        """The inventory's variables per host, as ansible-inventory reads them (a second or two):
        only to find the state directory when PIKIT_STATE_DIR does not name it."""
        if self.hostvars is None:
            run = subprocess.run(
                [VENV_BIN / "ansible-inventory", "-i", self.inventory, "--list"],
                capture_output=True,
                text=True,
                check=False,
            )
            if run.returncode != 0:
                raise SiteError(
                    f"ansible-inventory could not read {self.inventory}: {run.stderr.strip()[-500:]}"
                )
            found = json.loads(run.stdout).get("_meta", {}).get("hostvars", {})
            self.hostvars = {h: dict(v) for h, v in found.items()}
        return self.hostvars

    @property
    def groups(self) -> dict[str, list[str]]:
        """The kit's groups, and `all`."""
        return {**self.model["groups"], "all": list(self.model["hosts"])}

    def hosts(self, group: str) -> list[str]:
        return list(self.groups.get(group, []))

    def address(self, host: str) -> str:
        """Where the other nodes, and the controller, reach a host."""
        return str(self.model["hosts"][host]["address"])

    def endpoints(self, service: str, hosts: list[str]) -> list[str]:
        """`address:port` of `service` on each of `hosts` that serves it."""
        with _as_site_error():
            return service_endpoints(self.model, service, hosts)

    def addresses(self, service: str, hosts: list[str]) -> list[tuple[str, int]]:
        """(address, port) of `service` on each of `hosts` that serves it."""
        with _as_site_error():
            return service_addresses(self.model, service, hosts)

    def port(self, service: str, host: str) -> int:
        """The first port of `service` at `host`; 0 where it serves none."""
        with _as_site_error():
            return next(iter(service_ports(self.model, service, host)), 0)

    def setting(self, name: str) -> Any:
        """A value the site runs with, as the roles told the model."""
        try:
            return self.model["settings"][name]
        except KeyError:
            raise SiteError(f"the site model has no setting {name!r}: run the preflight again") from None

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
        """The controller's state of this site (CA, issued certificates, site.json):
        PIKIT_STATE_DIR, else the inventory's pikit_state_dir, else roles/pikit's default
        (~/.local/share/pikit/<cluster>).

        Asking Ansible takes seconds, longer than `pikit latest` takes to answer, so the answer is
        kept (state_dir_cache) for as long as no file of the inventory and no default of the pikit
        role changed, and the directory still holds a site model."""
        if os.environ.get("PIKIT_STATE_DIR"):
            return Path(os.environ["PIKIT_STATE_DIR"])
        key, stamp = str(self.inventory.resolve()), _inventory_stamp(self.inventory)
        cache = state_dir_cache()
        entries = _read_json(cache)
        kept = entries.get(key, {})
        kept_dir = Path(str(kept.get("state_dir") or ""))
        if kept.get("stamp") == stamp and kept.get("state_dir") and (kept_dir / "site.json").is_file():
            return kept_dir
        found = self._state_dir_from_inventory()
        with contextlib.suppress(OSError):  # a cache it cannot write only costs the next call time
            entries[key] = {"state_dir": str(found), "stamp": stamp}
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
        return found

    def _state_dir_from_inventory(self) -> Path:
        hostvars = self.inventory_hostvars()
        host = next(iter(hostvars), None)
        if host and "pikit_state_dir" in hostvars[host]:
            value = hostvars[host]["pikit_state_dir"]
            return Path(str(self.render(host, "pikit_state_dir") if _is_template(value) else value))
        cluster = hostvars.get(host or "", {}).get("pikit_cluster_name", "pikit")
        return Path.home() / ".local/share/pikit" / str(cluster)
