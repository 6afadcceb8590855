"""The README variable tables come from the argument specs, and a stale one fails the lint."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pikit_dev import roledocs

SPEC = """\
---
argument_specs:
  main:
    short_description: A role.
    options:
      demo_port:
        type: int
        description: "Port it listens on."
      demo_dir:
        type: path
        description:
          - "Where it keeps its data."
          - "Default: `<pikit_data_root>/demo`"
      demo_mode:
        type: str
        choices: [fast, safe]
        description: "How it runs."
  extra:
    short_description: Another entry point.
    options:
      demo_name:
        type: str
        required: true
        description: "The caller's name | with a bar."
"""
DEFAULTS = """\
---
demo_port: 8080
demo_dir: "{{ pikit_data_root }}/demo"
demo_mode: safe
"""


def make_role(root: Path, spec: str = SPEC, defaults: str = DEFAULTS) -> Path:
    role = root / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta/argument_specs.yml").write_text(spec)
    (role / "defaults/main.yml").write_text(defaults)
    (role / "README.md").write_text(f"# demo\n\nintro\n\n{roledocs.BEGIN}\n{roledocs.END}\n\nafter\n")
    return role


def test_the_table_shows_literal_stated_and_missing_defaults(tmp_path: Path) -> None:
    role = make_role(tmp_path)
    rows = {v.name: v for v in roledocs.variables(role)}
    assert list(rows) == ["demo_port", "demo_dir", "demo_mode", "demo_name"]
    assert rows["demo_port"].default == "`8080`"
    assert rows["demo_dir"].default == "`<pikit_data_root>/demo`"
    assert rows["demo_dir"].meaning == "Where it keeps its data."
    assert rows["demo_mode"].meaning == "How it runs. One of `fast`, `safe`."
    assert rows["demo_name"].default == "—"
    assert rows["demo_name"].meaning.endswith("(`tasks_from: extra`)")
    assert "with a bar" in roledocs.table(role) and "\\| with a bar" in roledocs.table(role)


def test_the_site_wide_settings_a_role_reads_are_named_not_declared_again(tmp_path: Path) -> None:
    role = make_role(tmp_path)
    (role / "meta/main.yml").write_text("dependencies:\n  - role: site\n")
    (role / "templates").mkdir()
    (role / "templates/demo.conf.j2").write_text("topic={{ site_topic }}\n")
    site = tmp_path / "site"
    (site / "meta").mkdir(parents=True)
    (site / "meta/argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n"
        "      site_topic: {type: str, description: x}\n      site_topics: {type: list, description: y}\n"
    )
    assert roledocs.site_wide(role) == {"site": ["site_topic"]}
    assert "reads the site-wide settings of `roles/site`, its dependency: `site_topic`." in roledocs.table(
        role
    )


def test_check_fails_on_a_stale_table_and_a_rewrite_mends_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    role = make_role(tmp_path)
    assert roledocs.main(["--check", "--roles", str(tmp_path)]) == 1
    assert "demo/README.md: the variable table is stale" in capsys.readouterr().err
    assert roledocs.main(["--roles", str(tmp_path)]) == 0
    readme = (role / "README.md").read_text()
    assert readme.startswith("# demo\n\nintro\n\n") and readme.endswith("\n\nafter\n")
    assert "| `demo_port` | `8080` | Port it listens on. |" in readme
    assert roledocs.main(["--check", "--roles", str(tmp_path)]) == 0


def test_a_computed_default_must_be_explained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = SPEC.replace('          - "Default: `<pikit_data_root>/demo`"\n', "")
    make_role(tmp_path, spec=spec)
    assert roledocs.main(["--check", "--roles", str(tmp_path)]) == 2
    assert "demo: demo_dir's default is computed" in capsys.readouterr().err


def test_a_readme_without_markers_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    role = make_role(tmp_path)
    (role / "README.md").write_text("# demo\n")
    assert roledocs.main(["--check", "--roles", str(tmp_path)]) == 2
    assert "needs exactly one pair of markers" in capsys.readouterr().err


def test_every_role_readme_in_the_repository_is_current() -> None:
    assert roledocs.main(["--check"]) == 0


def test_every_variable_of_a_roles_interface_has_a_default() -> None:
    """A variable the spec names but no defaults file sets fails the first run that templates it
    (spark_latest_gauge_devices did, in the e2e lab's first site.yml): the role's defaults or the
    site-wide ones (roles/pikit) set each."""
    repo = Path(__file__).resolve().parents[2]
    site_wide = set(yaml.safe_load((repo / "roles/pikit/defaults/main.yml").read_text()))
    missing = {}
    for spec in sorted(repo.glob("roles/*/meta/argument_specs.yml")):
        role = spec.parents[1]
        options = yaml.safe_load(spec.read_text())["argument_specs"].get("main", {}).get("options", {})
        defaults = role / "defaults/main.yml"
        defined = set(yaml.safe_load(defaults.read_text()) or {}) if defaults.exists() else set()
        unset = sorted(set(options) - defined - site_wide)
        if unset:
            missing[role.name] = unset
    assert not missing, missing
