"""A module of this repository as it was at an earlier commit, loaded beside today's, so
that a benchmark can time before and after in one run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from pikit import REPO
from pikit.modules import from_file


def module_at(commit: str, path: str, name: str, work: Path) -> ModuleType:
    """`path` (relative to the repository) as of `commit`, imported as module `name`."""
    source = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True, check=True
    ).stdout
    file = work / f"{name}.py"
    file.write_bytes(source)
    return from_file(name, file, register=True)


def package_at(commit: str, path: str, package: str, name: str, work: Path) -> ModuleType:
    """The package at `path` (named `package` in its own imports) as of `commit`, imported
    as `name`, its absolute imports of itself renamed: today's package stays as it is."""
    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{commit}:{path}"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    directory = work / name
    directory.mkdir(parents=True, exist_ok=True)
    for file in (f for f in listing.split() if f.endswith(".py")):
        source = subprocess.run(
            ["git", "show", f"{commit}:{path}/{file}"], cwd=REPO, capture_output=True, check=True
        ).stdout.decode()
        (directory / file).write_text(source.replace(f"{package}.", f"{name}."))
    spec = importlib.util.spec_from_file_location(
        name, directory / "__init__.py", submodule_search_locations=[str(directory)]
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
