"""The connect role's `kafka_connectors` module, importable by controller tools and tests: they use
the role's own reconciler and REST client rather than a copy."""

from __future__ import annotations

from pikit import REPO
from pikit.modules import from_file

kafka_connectors = from_file(
    "kafka_connectors", REPO / "roles/connect/library/kafka_connectors.py", register=True
)
