"""The connect role's `kafka_connectors` module and its workers' mirror lag probe, importable by
controller tools and tests: they use the role's own reconciler, REST client and measure rather
than a copy."""

from __future__ import annotations

from pikit import REPO
from pikit.modules import from_file

kafka_connectors = from_file(
    "kafka_connectors", REPO / "roles/connect/library/kafka_connectors.py", register=True
)

mirror_lag = from_file("pikit_mirror_lag", REPO / "roles/connect/files/pikit_mirror_lag.py", register=True)
