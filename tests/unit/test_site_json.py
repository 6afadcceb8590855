"""The preflight keeps the site model in <state_dir>/site.json (action plugin pikit_site_json):
0600 in a 0700 folder, the text `to_nice_json(sort_keys=true)` made, rewritten only on a change."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from ansible.plugins.filter.core import to_nice_json
from pikit_testkit.modules import from_file

from pikit import REPO

MODEL = {"cluster": "pikit", "hosts": {"pi-1": {"address": "10.0.0.1", "serves": ["kafka"]}}, "é": 1}


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    return from_file("pikit_site_json", REPO / "roles/pikit/action_plugins/pikit_site_json.py")


def test_the_text_is_what_to_nice_json_made(plugin: ModuleType) -> None:
    assert plugin.site_json(MODEL) == to_nice_json(MODEL, sort_keys=True) + "\n"


def test_it_is_written_once_private_and_again_only_on_a_change(plugin: ModuleType, tmp_path: Path) -> None:
    state = tmp_path / "state"
    text = plugin.site_json(MODEL)
    assert plugin.keep(state, text)
    assert json.loads((state / "site.json").read_text()) == MODEL
    assert (state.stat().st_mode & 0o777, (state / "site.json").stat().st_mode & 0o777) == (0o700, 0o600)
    assert not plugin.keep(state, text)
    assert plugin.keep(state, plugin.site_json({**MODEL, "cluster": "other"}))
    assert json.loads((state / "site.json").read_text())["cluster"] == "other"
    assert [p.name for p in state.iterdir()] == ["site.json"]  # no temporary file left behind


def test_loose_modes_are_made_private_again(plugin: ModuleType, tmp_path: Path) -> None:
    state = tmp_path / "state"
    text = plugin.site_json(MODEL)
    plugin.keep(state, text)
    (state / "site.json").chmod(0o644)
    assert plugin.keep(state, text)
    assert (state / "site.json").stat().st_mode & 0o777 == 0o600
    state.chmod(0o755)
    assert plugin.keep(state, text)
    assert state.stat().st_mode & 0o777 == 0o700


def test_check_mode_says_what_would_change_and_writes_nothing(plugin: ModuleType, tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert plugin.keep(state, plugin.site_json(MODEL), check_mode=True)
    assert not state.exists()
