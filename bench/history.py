"""A module of this repository as it was at an earlier commit, loaded beside today's, so
that a benchmark can time before and after in one run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from pikit_testkit.modules import from_file

from pikit import REPO


def _source_at(commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()


def _with_dependencies(
    source: str, commit: str, name: str, work: Path, dependencies: Mapping[str, str] | None
) -> str:
    """`source` reading, for each module of `dependencies` that it imports and that has since
    moved or gone (`edge_agent.contract`), that module's file as of `commit`, loaded beside it."""
    for module, dependency in (dependencies or {}).items():
        alias = f"{name}__{module.replace('.', '_')}"
        if alias not in sys.modules:
            module_at(commit, dependency, alias, work)
        source = source.replace(f"from {module} import", f"from {alias} import")
    return source


def module_at(
    commit: str, path: str, name: str, work: Path, dependencies: Mapping[str, str] | None = None
) -> ModuleType:
    """`path` (relative to the repository) as of `commit`, imported as module `name`.

    `dependencies` maps a module that the old file imports, and that has since moved or gone, to
    its path at `commit` (see _with_dependencies)."""
    source = _with_dependencies(_source_at(commit, path), commit, name, work, dependencies)
    file = work / f"{name}.py"
    file.write_text(source)
    return from_file(name, file, register=True)


def package_at(
    commit: str, path: str, package: str, name: str, work: Path, dependencies: Mapping[str, str] | None = None
) -> ModuleType:
    """The package at `path` (named `package` in its own imports) as of `commit`, imported
    as `name`, its absolute imports of itself renamed: today's package stays as it is. Its
    `dependencies` as module_at's."""
    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{commit}:{path}"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    directory = work / name
    directory.mkdir(parents=True, exist_ok=True)
    for file in (f for f in listing.split() if f.endswith(".py")):
        source = _source_at(commit, f"{path}/{file}").replace(f"{package}.", f"{name}.")
        (directory / file).write_text(_with_dependencies(source, commit, name, work, dependencies))
    spec = importlib.util.spec_from_file_location(
        name, directory / "__init__.py", submodule_search_locations=[str(directory)]
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
