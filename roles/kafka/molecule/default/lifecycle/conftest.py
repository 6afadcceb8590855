"""The scenario's verifier runs in the order a cluster lives: the upgrade from the previous release
first (its first test asserts that release), then the role's checks (../tests) on the upgraded
cluster, then a broker added and taken out again. Molecule hands pytest the files sorted by path."""

from __future__ import annotations

import pytest

ORDER = ("test_upgrade.py", "test_cluster.py", "test_metrics.py", "test_scale.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unknown = sorted({item.path.name for item in items} - set(ORDER))
    assert not unknown, f"a verifier file with no place in the order: {unknown}"
    items.sort(key=lambda item: ORDER.index(item.path.name))  # stable: each file keeps its own order
