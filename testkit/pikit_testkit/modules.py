"""A Python file that is not part of a package (an Ansible module or filter plugin, a script),
imported from its path: the tests and benches use the file itself, not a copy. The kit's own
packages import nothing by its path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def from_file(name: str, path: Path, register: bool = False) -> ModuleType:
    """The file at `path` imported as module `name`; `register` puts it in sys.modules
    (dataclasses and pickling look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
