"""Keep the site model for the controller's tools: `<state_dir>/site.json`, 0600 in a 0700 folder.

The preflight of every playbook writes it once per run, in the controller's own process: the
`file` and `copy` tasks it replaces each reached the controller through a connection to
localhost (with Mitogen, a local interpreter started for them), 2.7 s of a preflight's 8 s.
The file is replaced whole (written beside it, then renamed), and only when its content changes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.plugins.filter.core import to_nice_json


def site_json(model: Any) -> str:
    """The file's text, as the `copy` task it replaces wrote it: `to_nice_json(sort_keys=true)`."""
    return str(to_nice_json(model, sort_keys=True)) + "\n"


def keep(state_dir: Path, text: str, check_mode: bool = False) -> bool:
    """Write `text` to state_dir/site.json unless it holds it already, and keep the folder 0700;
    whether anything changed."""
    path = state_dir / "site.json"
    try:
        same = path.read_text() == text and (path.stat().st_mode & 0o777) == 0o600
        folder_kept = (state_dir.stat().st_mode & 0o777) == 0o700
    except FileNotFoundError:
        same = folder_kept = False
    if same and folder_kept:
        return False
    if check_mode:
        return True
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    state_dir.chmod(0o700)
    if same:
        return True
    handle, temporary = tempfile.mkstemp(dir=state_dir, prefix=".site.json.")
    try:
        with os.fdopen(handle, "w") as out:  # mkstemp made it 0600
            out.write(text)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return True


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type information
    """Args: `model` (the site model), `state_dir` (the controller's state folder)."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        state_dir = Path(str(self._task.args["state_dir"])).expanduser()
        path = state_dir / "site.json"
        changed = keep(state_dir, site_json(self._task.args["model"]), bool(self._task.check_mode))
        result.update(changed=changed, path=str(path))
        return result
