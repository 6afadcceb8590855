"""Where the controller's tools find a site's state: Ansible's answer, kept between calls while
the inventory stays as it was (pikit/site.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pikit import site as site_module
from pikit.site import Site


@pytest.fixture
def asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Each time Ansible is asked for the state directory, which answers tmp_path/state."""
    monkeypatch.delenv("PIKIT_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls: list[Path] = []

    def from_inventory(self: Site) -> Path:
        calls.append(self.inventory)
        return tmp_path / "state"

    monkeypatch.setattr(site_module.Site, "_state_dir_from_inventory", from_inventory)
    (tmp_path / "state").mkdir()
    (tmp_path / "state/site.json").write_text("{}")
    (tmp_path / "inventory/group_vars").mkdir(parents=True)
    (tmp_path / "inventory/hosts.yml").write_text("all: {hosts: {pi-1: }}\n")
    (tmp_path / "inventory/group_vars/all.yml").write_text("pikit_cluster_name: farm\n")
    return calls


def test_the_state_directory_is_asked_once_while_the_inventory_stays(
    tmp_path: Path, asked: list[Path]
) -> None:
    inventory = tmp_path / "inventory"
    assert Site(inventory).state_dir == tmp_path / "state"
    assert Site(inventory).state_dir == tmp_path / "state"
    assert len(asked) == 1, "the second tool call reads the kept answer"
    assert site_module.state_dir_cache() == tmp_path / "cache/pikit/state-dirs.json"


def test_a_changed_inventory_file_or_a_missing_model_asks_again(tmp_path: Path, asked: list[Path]) -> None:
    inventory = tmp_path / "inventory"
    assert Site(inventory).state_dir == tmp_path / "state"
    group_vars = inventory / "group_vars/all.yml"
    later = group_vars.stat().st_mtime + 60
    os.utime(group_vars, (later, later))
    assert Site(inventory).state_dir == tmp_path / "state"
    assert len(asked) == 2, "an edited group_vars file may name another state directory"
    (tmp_path / "state/site.json").unlink()
    Site(inventory).state_dir  # noqa: B018 - the property asks Ansible
    assert len(asked) == 3, "a state directory without a site model is not trusted"


def test_pikit_state_dir_wins_without_asking(
    tmp_path: Path, asked: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIKIT_STATE_DIR", str(tmp_path / "elsewhere"))
    assert Site(tmp_path / "inventory").state_dir == tmp_path / "elsewhere"
    assert asked == []
