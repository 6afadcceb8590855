"""The bundle the spark role ships (spark_apps/bundle.py) holds every module the apps import."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

from pikit_testkit.modules import from_file

from pikit import REPO


def test_every_kit_module_the_apps_import_is_in_the_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "pikit_spark.zip"
    from_file("bundle", REPO / "spark_apps/bundle.py").build(bundle)
    with zipfile.ZipFile(bundle) as zf:
        shipped = set(zf.namelist())
        sources = {name: zf.read(name) for name in shipped}
    apps = {p.name: p.read_bytes() for p in (REPO / "spark_apps").glob("*.py") if p.name != "bundle.py"}
    needed: set[str] = set()
    for text in [*sources.values(), *apps.values()]:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not any(n.split(".")[0] == "edge_agent" for n in names), "the apps do not import the agent"
            needed |= {n for n in names if n.split(".")[0] in ("pikit_contract", "pikit_spark")}

    def resolves(name: str) -> bool:
        parts = name.split(".")
        return any(
            f"{'/'.join(parts[:i])}.py" in shipped or f"{'/'.join(parts[:i])}/__init__.py" in shipped
            for i in range(2, len(parts) + 1)
        )

    missing = sorted(n for n in needed if "." in n and not resolves(n))
    assert not missing, f"imported by the apps but not in the bundle: {missing}"
    assert {
        "pikit_contract/signing.py",
        "pikit_contract/readings.py",
        "pikit_contract/__init__.py",
    } <= shipped
    assert not any(name.startswith("edge_agent/") for name in shipped)
