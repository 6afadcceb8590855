"""plugins/strategy/mitogen_linear.py: what the controller loads once, before it forks workers.

The warm-up reaches into Ansible's and Mitogen's internals (both pinned in requirements.txt). An
upgrade that renames them must fail here, not quietly make every converge slower again."""

from __future__ import annotations

from types import ModuleType, SimpleNamespace

import ansible.collections.list
import ansible_mitogen.planner
import pytest
from ansible.plugins.loader import filter_loader, init_plugin_loader, test_loader

from pikit import REPO
from pikit.modules import from_file


@pytest.fixture(autouse=True, scope="module")
def collections_importable() -> None:
    """What ansible-playbook does at start: the bundled collections become importable."""
    init_plugin_loader()


def load() -> ModuleType:
    return from_file("mitogen_linear", REPO / "plugins/strategy/mitogen_linear.py")


def test_the_warm_up_fills_the_jinja_plugin_caches_every_worker_inherits() -> None:
    strategy = load()
    strategy.warm_before_fork()

    for loader in (filter_loader, test_loader):
        cached = loader._cached_non_collection_wrappers
        assert cached, f"{loader.type}: nothing cached before the first fork"
    assert "ansible.builtin.to_json" in filter_loader._cached_non_collection_wrappers
    assert "ansible.builtin.version" in test_loader._cached_non_collection_wrappers


def test_mitogen_takes_the_collections_listed_once() -> None:
    strategy = load()
    original = ansible_mitogen.planner._load_collections
    assert "_load_collections" in ansible_mitogen.planner.invoke.__code__.co_names, (
        "Mitogen's invoke() no longer calls _load_collections: the patch would do nothing"
    )
    try:
        strategy.warm_before_fork()
        assert ansible_mitogen.planner._load_collections is strategy._load_collections

        mine = SimpleNamespace(_extra_sys_paths=set())
        theirs = SimpleNamespace(_extra_sys_paths=set())
        strategy._load_collections(mine)
        original(theirs)
        assert mine._extra_sys_paths == theirs._extra_sys_paths
        assert mine._extra_sys_paths == {p.decode() for p in ansible.collections.list.list_collection_dirs()}
        assert any(p.endswith("community/crypto") for p in mine._extra_sys_paths)
    finally:
        ansible_mitogen.planner._load_collections = original
