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

Some host-tasks need no worker at all (a fork costs the controller ~7 ms here, and the worker
more); `_queue_task` does them in the controller and sends the worker's result itself:

- a task whose `when` is false on the host (a quarter of a no-op's host-tasks): decided the way
  the worker decides it, with the same variables and the play context's;
- `set_fact`, `assert`, `debug` and `validate_argument_spec`, which never touch the host (another
  quarter): Ansible's own TaskExecutor runs them, on a copy of the task, as a worker would.

Anything unusual goes to a worker as before: a loop (its `when` is decided per item), delegation
(it changes the variables), `until`, a timeout or async, an error or a warning while deciding,
or a condition that holds on a task that needs the host.
"""

from __future__ import annotations

from typing import Any

import ansible.collections.list
import ansible_mitogen.loaders
import ansible_mitogen.planner
import ansible_mitogen.strategy
from ansible._internal._display_utils import DeferredWarningContext
from ansible._internal._templating._engine import TemplateEngine
from ansible.executor.task_executor import TaskExecutor
from ansible.executor.task_result import _RawTaskResult
from ansible.plugins.loader import filter_loader, get_plugin_loader_namespace, test_loader
from ansible.utils.fqcn import add_internal_fqcns

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


_CONTROLLER_ONLY = frozenset(add_internal_fqcns(("set_fact", "assert", "debug", "validate_argument_spec")))


def _plain(task: Any) -> bool:
    """No loop, delegation, retries, timeout or async: a worker would do it in one plain step."""
    return (
        task.loop is None
        and not task.loop_with
        and task.delegate_to is None
        and not task.until
        and not task.timeout
        and not task.async_val
    )


def runs_in_controller(task: Any) -> bool:
    """An action that never touches the host, in a plain task."""
    return task.action in _CONTROLLER_ONLY and _plain(task)


def false_condition(host: Any, task: Any, task_vars: dict[str, Any], play_context: Any, loader: Any) -> Any:
    """The first of the task's conditions that is false on this host, as its worker would find it;
    None when the task must go to a worker (it runs, or it is not plain enough to decide here)."""
    if not task.when or not _plain(task):
        return None
    # Most conditions hold, and a worker decides them again: a first look on the task's variables
    # alone sends those on cheaply. Only a condition that looks false is decided the worker's way.
    if _decide(task, task_vars) is None:
        return None
    templar = TemplateEngine(loader=loader, variables=task_vars)
    try:
        context = play_context.set_task_and_variable_override(task=task, variables=task_vars, templar=templar)
        context.post_validate(templar=templar)
        if not context.remote_addr:
            context.remote_addr = host.address
        variables = task_vars.copy()
        context.update_vars(variables)
    except Exception:
        return None
    return _decide(task, variables)


def _decide(task: Any, variables: dict[str, Any]) -> Any:
    """The task's first false condition on these variables; None if all hold, or on any doubt."""
    outcome: dict[str, Any] = {}
    try:
        with DeferredWarningContext(variables=variables) as warnings:
            holds = task._resolve_conditional(task.when, variables, result_context=outcome)
    except Exception:
        return None
    if holds or warnings.get_warnings() or warnings.get_deprecation_warnings():
        return None
    return outcome["false_condition"]


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):  # type: ignore[misc,valid-type]
    def run(self, iterator: Any, play_context: Any, result: int = 0) -> Any:
        warm_before_fork()
        return super().run(iterator, play_context)

    def _queue_task(self, host: Any, task: Any, task_vars: Any, play_context: Any) -> Any:
        if runs_in_controller(task):
            return self._answer_here(host, task, task_vars, play_context, None)
        condition = false_condition(host, task, task_vars, play_context, self._loader)
        if condition is not None:
            return self._answer_here(host, task, task_vars, play_context, condition)
        return super()._queue_task(host, task, task_vars, play_context)

    def _answer_here(self, host: Any, task: Any, task_vars: Any, play_context: Any, condition: Any) -> None:
        """What `_queue_task` and its worker do, without the worker: the result goes through the
        results queue, as a worker's would; `condition` is a false `when` already decided."""
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host,
            "task": task,
            "task_vars": task_vars,
            "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)
        own = task.copy()  # the worker's copy: TaskExecutor squashes it, and may change it
        if condition is None:
            result = TaskExecutor(
                host,
                own,
                dict(task_vars),
                play_context,
                self._loader,
                get_plugin_loader_namespace(),
                self._final_q,
                self._variable_manager,
            ).run()
        else:
            own.squash()
            result = {
                "changed": False,
                "skipped": True,
                "skip_reason": "Conditional result was False",
                "false_condition": condition,
            }
            own.update_result_no_log(TemplateEngine(loader=self._loader, variables=task_vars), result)
        self._final_q.send_task_result(
            _RawTaskResult(host=host, task=own, return_data=result, task_fields=own.dump_attrs())
        )
        self._pending_results += 1
