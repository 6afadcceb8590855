"""The kit's packages stand on each other one way: pikit_contract on nothing of the kit; the agent,
the Spark apps' library and the controller's tools on pikit_contract, never on each other; the
developers' tooling (the lab, make's pipelines) on the controller's tools, never the other way; and no
module of a package imports, at the top or inside a function, one that imports it back."""

from __future__ import annotations

import ast

import pytest

from pikit import REPO

PACKAGES = {
    "pikit_contract": REPO / "contract/pikit_contract",
    "edge_agent": REPO / "edge_agent/edge_agent",
    "pikit_spark": REPO / "spark_apps/pikit_spark",
    "pikit": REPO / "pikit",
    "pikit_dev": REPO / "devtools/pikit_dev",
}
# What each package may import of the kit's own packages.
ALLOWED = {
    "pikit_contract": {"pikit_contract"},
    "edge_agent": {"edge_agent", "pikit_contract"},
    "pikit_spark": {"pikit_spark", "pikit_contract"},
    "pikit": {"pikit", "pikit_contract"},
    "pikit_dev": {"pikit_dev", "pikit", "pikit_contract"},
}


def modules(package: str) -> dict[str, set[str]]:
    """Each module of `package` and every kit module it imports, anywhere in its code."""
    root = PACKAGES[package]
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        found[name] = {n for n in imported if n.split(".")[0] in PACKAGES}
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_package_imports_only_the_packages_beneath_it(package: str) -> None:
    wrong = {
        (module, name)
        for module, names in modules(package).items()
        for name in names
        if name.split(".")[0] not in ALLOWED[package]
    }
    assert not wrong, f"{package} imports what it may not stand on: {sorted(wrong)}"


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_module_imports_one_that_imports_it_back(package: str) -> None:
    graph = modules(package)
    edges = {
        m: {n if n in graph else n.rpartition(".")[0] for n in names} & set(graph) - {m}
        for m, names in graph.items()
    }

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            if here == goal:
                return True
            if here not in seen:
                seen.add(here)
                todo += sorted(edges.get(here, ()))
        return False

    circles = sorted((a, b) for a, targets in edges.items() for b in targets if a < b and reaches(b, a))
    assert not circles, f"modules of {package} that import each other, directly or not: {circles}"
