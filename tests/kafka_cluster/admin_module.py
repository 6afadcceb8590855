"""The role's kafka_admin module, imported from its file so the tests reuse its health gate."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("kafka_admin", REPO / "roles/kafka/library/kafka_admin.py")
assert _spec and _spec.loader
kafka_admin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kafka_admin)
