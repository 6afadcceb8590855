"""pikit's controller-side tools."""

from pathlib import Path

# The repository the kit runs from (the packages are installed editable, in place).
REPO = Path(__file__).resolve().parents[1]
