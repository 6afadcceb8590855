"""pikit's controller-side tools."""

from pathlib import Path

import yaml

# The repository the kit runs from (the packages are installed editable, in place).
REPO = Path(__file__).resolve().parents[1]


def role_default(role: str, key: str) -> str:
    """A role's default as written (its defaults/main.yml): the kit's pinned versions, which
    `make artifacts` caches before any inventory exists. A value a site runs with is the site
    model's (pikit/site.py), as Ansible resolved it, never this."""
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text())
    return str(defaults[key])
