"""The kafka role's `kafka_admin` module, importable by controller tools and tests.

The module lives in roles/kafka/library/ (Ansible runs it from there); this loads
that same file, so the demo and the tests use the role's own health gate and
reconciler rather than a copy.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

from pikit import REPO


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kafka_admin", REPO / "roles/kafka/library/kafka_admin.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kafka_admin = _load()
