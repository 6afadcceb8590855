"""The bundled Spark apps' entry modules (spark_apps/<app>.py), loaded by path as spark-submit runs them."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from pikit import REPO


def app_module(app: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"pikit_app_{app}", REPO / "spark_apps" / f"{app}.py")
    assert spec and spec.loader, app
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
