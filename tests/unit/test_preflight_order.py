"""The preflight writes the controller's copy of the site model only once every check passed
(roles/pikit/tasks/preflight.yml)."""

from __future__ import annotations

from typing import Any

import yaml

from pikit import REPO


def test_the_site_model_is_kept_only_after_every_check() -> None:
    tasks: list[dict[str, Any]] = yaml.safe_load((REPO / "roles/pikit/tasks/preflight.yml").read_text())
    writes = [i for i, task in enumerate(tasks) if "pikit_site_json" in task]
    checks = [
        i
        for i, task in enumerate(tasks)
        if task.get("ansible.builtin.include_role", {}).get("tasks_from")
        in {"validate", "voters_check", "disk_plan"}
    ]
    assert len(writes) == 1 and len(checks) >= 8, (writes, checks)
    assert writes[0] > max(checks), "site.json is written before a check that may refuse the inventory"
    assert tasks[-1]["name"] == "Record that the inventory passed" and writes[0] == len(tasks) - 2
