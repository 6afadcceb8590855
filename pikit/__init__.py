"""pikit's controller-side tools."""

from pathlib import Path

import yaml

# The repository the kit runs from (the packages are installed editable, in place).
REPO = Path(__file__).resolve().parents[1]


def role_default(role: str, key: str) -> str:
    """A role's default (its defaults/main.yml, the role's interface): versions and thresholds are
    set there once, and the controller-side tools read them from there."""
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text())
    return str(defaults[key])
