"""Each role's README variable table, generated from its `meta/argument_specs.yml`.

The argument spec is the one place a variable is documented: its `description` says what it
means, and `defaults/main.yml` holds its value. A default computed with Jinja cannot be shown as
it is, so its spec says in words what it comes to, as a description line starting `Default:`.

    python -m pikit_dev.roledocs            rewrite the tables in roles/*/README.md
    python -m pikit_dev.roledocs --check    fail, naming the README, when a table is stale (make lint)

The table sits between the BEGIN and END markers below; the rest of the README is written by hand.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pikit import REPO

ROLES = REPO / "roles"
BEGIN = "<!-- BEGIN variables: generated from meta/argument_specs.yml by `python -m pikit_dev.roledocs` -->"
END = "<!-- END variables -->"
DEFAULT_PREFIX = "Default: "
_SHOWN_INLINE = 60  # longer literal defaults are left to defaults/main.yml


class SpecError(ValueError):
    """An argument spec the table cannot be made from; the message names role and variable."""


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    meaning: str


def _lines(description: Any) -> list[str]:
    if description is None:
        return []
    return [description] if isinstance(description, str) else [str(line) for line in description]


def _literal(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    if text == "":
        return '`""`'
    if len(text) > _SHOWN_INLINE:
        return "see `defaults/main.yml`"
    return f"`{text}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _defaults(role: Path) -> dict[str, Any]:
    path = role / "defaults/main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def variables(role: Path) -> list[Variable]:
    """The role's variables in spec order, every entry point's options once (main first)."""
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
    defaults = _defaults(role)
    seen: dict[str, Variable] = {}
    for entry in sorted(specs, key=lambda name: name != "main"):
        for name, option in (specs[entry].get("options") or {}).items():
            if name in seen:
                continue
            lines = _lines(option.get("description"))
            stated = [line[len(DEFAULT_PREFIX) :] for line in lines if line.startswith(DEFAULT_PREFIX)]
            meaning = " ".join(line for line in lines if not line.startswith(DEFAULT_PREFIX))
            if not meaning:
                raise SpecError(f"{role.name}: {name} has no description in meta/argument_specs.yml")
            if entry != "main":
                meaning += f" (`tasks_from: {entry}`)"
            if "choices" in option:
                meaning += " One of " + ", ".join(f"`{c}`" for c in option["choices"]) + "."
            if stated:
                default = stated[0]
            elif name not in defaults:
                default = "—"
            elif isinstance(defaults[name], str) and ("{{" in defaults[name] or "{%" in defaults[name]):
                raise SpecError(
                    f"{role.name}: {name}'s default is computed; say what it comes to in a "
                    f"description line starting {DEFAULT_PREFIX!r}"
                )
            else:
                default = _literal(defaults[name])
            seen[name] = Variable(name, default, meaning)
    return list(seen.values())


def _dependencies(role: Path) -> list[Path]:
    meta = yaml.safe_load((role / "meta/main.yml").read_text()) if (role / "meta/main.yml").exists() else {}
    return [
        role.parent / (dependency["role"] if isinstance(dependency, dict) else dependency)
        for dependency in (meta or {}).get("dependencies") or []
    ]


def site_wide(role: Path) -> dict[str, list[str]]:
    """Per dependency, the variables its spec declares that this role's own files use: a setting
    is declared once, by the role that sets it for the whole site (roles/pikit), not again by each
    role that reads it."""
    used = " ".join(
        path.read_text()
        for folder in ("defaults", "vars", "tasks", "handlers", "templates", "filter_plugins", "library")
        for path in sorted((role / folder).rglob("*"))
        if path.is_file() and path.suffix in {".yml", ".j2", ".py"}
    )
    out: dict[str, list[str]] = {}
    for dep in _dependencies(role):
        specs = yaml.safe_load((dep / "meta/argument_specs.yml").read_text())["argument_specs"]
        declared = {name for entry in specs.values() for name in entry.get("options") or {}}
        out[dep.name] = sorted(name for name in declared if re.search(rf"\b{name}\b", used))
    return out


def table(role: Path) -> str:
    rows = [f"| `{v.name}` | {_cell(v.default)} | {_cell(v.meaning)} |" for v in variables(role)]
    read = [
        f"It also reads the site-wide settings of `roles/{dep}`, its dependency: "
        + ", ".join(f"`{name}`" for name in names)
        + "."
        for dep, names in site_wide(role).items()
        if names
    ]
    head = [BEGIN, "", "| variable | default | meaning |", "|---|---|---|", *rows, ""]
    return "\n".join([*head, *(f"{line}\n" for line in read), END])


def render(readme: str, generated: str, where: str) -> str:
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise SpecError(f"{where}: needs exactly one pair of markers:\n{BEGIN}\n{END}")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    return head + generated + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when a README table is stale")
    parser.add_argument("--roles", type=Path, default=ROLES)
    args = parser.parse_args(argv)
    stale = []
    for spec in sorted(args.roles.glob("*/meta/argument_specs.yml")):
        role = spec.parent.parent
        readme_path = role / "README.md"
        try:
            readme = readme_path.read_text()
            wanted = render(readme, table(role), str(readme_path))
        except SpecError as error:
            print(error, file=sys.stderr)
            return 2
        if wanted == readme:
            continue
        if args.check:
            stale.append(readme_path)
        else:
            readme_path.write_text(wanted)
            print(f"wrote {readme_path}")
    for path in stale:
        print(f"{path}: the variable table is stale; run python -m pikit_dev.roledocs", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
