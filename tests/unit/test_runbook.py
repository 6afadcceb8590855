"""Every alert rule links its runbook section (docs/runbook.md), and every section it links exists;
every section is an alert's."""

from __future__ import annotations

import re

from pikit import REPO

RULES = REPO / "roles/monitoring/templates/pikit.rules.yml.j2"
RUNBOOK = REPO / "docs/runbook.md"


def _rules() -> dict[str, str]:
    """Each rule's text, by alert name."""
    parts = re.split(r"(?m)^      - alert: (\w+)\n", RULES.read_text())
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _anchors() -> set[str]:
    """GitHub's anchors of the runbook's sections: the heading in lower case."""
    return {heading.strip().lower() for heading in re.findall(r"(?m)^## (.+)$", RUNBOOK.read_text())}


def test_every_alert_links_its_own_runbook_section_and_it_exists() -> None:
    rules = _rules()
    assert len(rules) >= 18
    anchors = _anchors()
    for alert, text in rules.items():
        links = re.findall(r'runbook_url: "\{\{ monitoring_runbook_url \}\}#([a-z0-9-]+)"', text)
        assert links == [alert.lower()], f"{alert}: runbook_url {links}"
        assert alert.lower() in anchors, f"{alert}: no section in {RUNBOOK.name}"


def test_every_runbook_section_is_an_alert_of_the_kit() -> None:
    assert _anchors() == {alert.lower() for alert in _rules()}
