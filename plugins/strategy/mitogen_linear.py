"""Ansible's linear strategy over Mitogen's connections (mitogen, pinned in requirements.txt).

Mitogen keeps one Python interpreter per host for the whole run and sends modules to it, where
Ansible otherwise starts a new interpreter over SSH for every task and loop item. The kit selects
it in ansible.cfg (`strategy`); `ANSIBLE_STRATEGY=linear` runs without it.

Ansible forks a worker for every host and task, and each worker starts from the controller's
memory as it was at the fork. Work a worker does once per process is therefore done again in
every worker, ~2,000 times in a no-op `site.yml`. `warm_before_fork` does the two largest such
pieces once, in the controller, before the first fork (a py-spy profile of the no-op: 9 s and
4.5 s of the workers' CPU):

- Ansible lists and imports every Jinja filter and test plugin the first time a template names a
  filter or a test (`Jinja2Loader._ensure_non_collection_wrappers`, reached through `all()`);
- Mitogen lists the installed collections' directories for every module it runs
  (`ansible_mitogen.planner._load_collections`); they do not change during a run.
"""

from __future__ import annotations

from typing import Any

import ansible.collections.list
import ansible_mitogen.loaders
import ansible_mitogen.planner
import ansible_mitogen.strategy
from ansible.plugins.loader import filter_loader, test_loader

_Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)

_collection_dirs: tuple[str, ...] | None = None


def _collection_dirs_once() -> tuple[str, ...]:
    global _collection_dirs
    if _collection_dirs is None:
        _collection_dirs = tuple(
            path.decode("utf-8") for path in ansible.collections.list.list_collection_dirs()
        )
    return _collection_dirs


def _load_collections(invocation: Any) -> None:
    """Mitogen's `_load_collections`, with the directories listed once per run."""
    invocation._extra_sys_paths.update(_collection_dirs_once())


def warm_before_fork() -> None:
    """Load, in the controller, what every forked worker would otherwise load again."""
    for loader in (filter_loader, test_loader):
        for _ in loader.all():
            pass
    _collection_dirs_once()
    ansible_mitogen.planner._load_collections = _load_collections


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):  # type: ignore[misc,valid-type]
    def run(self, iterator: Any, play_context: Any, result: int = 0) -> Any:
        warm_before_fork()
        return super().run(iterator, play_context)
