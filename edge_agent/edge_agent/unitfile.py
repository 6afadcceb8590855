"""The agent's systemd unit for a flashed device, rendered from the kit's one unit pattern.

The `edge_agent` role installs the unit through `roles/service_unit` (its template and
defaults) with the values of `_edge_agent_unit` in its `vars/main.yml`. `edge-agent flash`
renders those same files, so a flashed device runs the unit that the role would install;
nothing of the unit is written here. It therefore needs the kit's
checkout (the editable install `make bootstrap` makes), as the rest of `flash` needs
the kit's artifact cache for the wheels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

KIT = Path(__file__).resolve().parents[2]
ROLES = KIT / "roles"
UNIT_ROLE = "service_unit"
UNIT_VALUES = "_edge_agent_unit"


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


def render(managed: str, facts: dict[str, Any], roles: Path = ROLES) -> str:
    """The unit, as Ansible's template module renders it: `facts` supplies what the role's
    defaults take from the inventory (the device id, the spool directory)."""
    import jinja2
    import jinja2.nativetypes

    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    # A value is rendered as Ansible renders a variable: to its native type ("{{ a_list }}": a list).
    native = jinja2.nativetypes.NativeEnvironment(undefined=jinja2.StrictUndefined)

    def value(raw: Any, context: dict[str, Any]) -> Any:
        if isinstance(raw, str) and "{" in raw:
            rendered = native.from_string(raw).render(context)
            return rendered.strip() if isinstance(rendered, str) else rendered
        if isinstance(raw, str):
            return raw
        if isinstance(raw, list):
            return [value(item, context) for item in raw]
        return raw

    role = {**_yaml(roles / "edge_agent/defaults/main.yml"), **facts}
    unit = {**_yaml(roles / f"{UNIT_ROLE}/defaults/main.yml")}
    unit.update({key: value(raw, role) for key, raw in role_values(roles).items()})
    template = env.from_string((roles / f"{UNIT_ROLE}/templates/service.j2").read_text())
    return template.render(ansible_managed=managed, **unit)
