"""The agent's systemd unit and layout for a flashed device, rendered from the role's own files.

The `edge_agent` role installs the unit through `roles/service_unit` (its template and
defaults) with the values of `_edge_agent_unit` in its `vars/main.yml`, and puts the agent's
files where `_edge_agent_layout` says. `edge-agent flash` renders those same values, so a
flashed device runs the unit that the role would install, from the same places; nothing of
either is written here. It therefore needs the kit's
checkout (the editable install `make bootstrap` makes), as the rest of `flash` needs
the kit's artifact cache for the wheels.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

KIT = Path(__file__).resolve().parents[2]
ROLES = KIT / "roles"
UNIT_ROLE = "service_unit"
UNIT_VALUES = "_edge_agent_unit"
LAYOUT = "_edge_agent_layout"


class UnitSourceError(RuntimeError):
    """The kit's roles are not where this package was installed from."""


def _yaml(path: Path) -> Any:
    import yaml

    if not path.exists():
        raise UnitSourceError(f"{path}: not found; run `edge-agent flash` from the pikit checkout")
    return yaml.safe_load(path.read_text())


def role_values(roles: Path = ROLES) -> dict[str, Any]:
    """The edge_agent role's values of the service_unit role's variables, unrendered."""
    values = (_yaml(roles / "edge_agent/vars/main.yml") or {}).get(UNIT_VALUES)
    if not isinstance(values, dict):
        raise UnitSourceError(f"{roles}/edge_agent/vars/main.yml: no {UNIT_VALUES} mapping")
    return {f"{UNIT_ROLE}_{key}": raw for key, raw in values.items()}


@functools.cache
def _renderer() -> Any:
    import jinja2.nativetypes

    # A value is rendered as Ansible renders a variable: to its native type ("{{ a_list }}": a list).
    native = jinja2.nativetypes.NativeEnvironment(undefined=jinja2.StrictUndefined)

    def value(raw: Any, context: dict[str, Any]) -> Any:
        if isinstance(raw, str) and "{" in raw:
            rendered = native.from_string(raw).render(context)
            return rendered.strip() if isinstance(rendered, str) else rendered
        if isinstance(raw, list):
            return [value(item, context) for item in raw]
        if isinstance(raw, dict):
            return {key: value(item, context) for key, item in raw.items()}
        return raw

    return value


def _context(facts: dict[str, Any], roles: Path) -> dict[str, Any]:
    """What the role's values are rendered with: the site-wide defaults (roles/pikit), the role's
    defaults, `facts` (what the inventory gives: the device id, the spool directory), and the
    rendered layout."""
    value = _renderer()
    context = {
        **(_yaml(roles / "pikit/defaults/main.yml") or {}),
        **(_yaml(roles / "edge_agent/defaults/main.yml") or {}),
        **facts,
    }
    raw = (_yaml(roles / "edge_agent/vars/main.yml") or {}).get(LAYOUT)
    if not isinstance(raw, dict):
        raise UnitSourceError(f"{roles}/edge_agent/vars/main.yml: no {LAYOUT} mapping")
    context[LAYOUT] = value(raw, context)
    return context


def layout(facts: dict[str, Any] | None = None, roles: Path = ROLES) -> dict[str, Any]:
    """Where the role puts the agent on a device (`_edge_agent_layout`), rendered from its defaults."""
    return dict(_context(facts or {}, roles)[LAYOUT])


def render(managed: str, facts: dict[str, Any], roles: Path = ROLES) -> str:
    """The unit, as Ansible's template module renders it: `facts` supplies what the role's
    defaults take from the inventory (the device id, the spool directory)."""
    import jinja2

    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    value = _renderer()
    role = _context(facts, roles)
    unit = {**_yaml(roles / f"{UNIT_ROLE}/defaults/main.yml")}
    unit.update({key: value(raw, role) for key, raw in role_values(roles).items()})
    template = env.from_string((roles / f"{UNIT_ROLE}/templates/service.j2").read_text())
    return template.render(ansible_managed=managed, **unit)
