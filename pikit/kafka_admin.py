"""The kafka role's `kafka_admin` module, importable by controller tools and tests.

The module lives in roles/kafka/library/ (Ansible runs it from there); this loads
that same file, so the demo and the tests use the role's own health gate and
reconciler rather than a copy.
"""

from __future__ import annotations

from pikit import REPO
from pikit.modules import from_file

kafka_admin = from_file("kafka_admin", REPO / "roles/kafka/library/kafka_admin.py")
