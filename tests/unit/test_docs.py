"""The documents stay readable: README.md within 200 lines, no table cell of any Markdown file of the
repository longer than a line (300 characters), and every relative link of README.md and docs/
pointing at a file that exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from pikit import REPO

README_LINES = 200
CELL_CHARS = 300


def markdown_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPO / name for name in listed if (REPO / name).exists()]


def cells(line: str) -> list[str]:
    """A Markdown table row's cells; `\\|` is a pipe inside a cell."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_the_readme_is_read_in_ten_minutes() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines"


def test_no_table_cell_is_longer_than_a_line() -> None:
    assert len(markdown_files()) > 10
    long = [
        f"{path.relative_to(REPO)}:{number}: {len(cell)} characters"
        for path in markdown_files()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line.lstrip().startswith("|")
        for cell in cells(line)
        if len(cell) > CELL_CHARS
    ]
    assert not long, "\n".join(long)


def test_the_readme_and_docs_link_only_to_files_that_exist() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    missing = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                missing.append(f"{page.relative_to(REPO)} -> {target}")
    assert not missing, missing
    assert (REPO / "docs/architecture.svg").exists() and (REPO / "docs/runbook.md").exists()
