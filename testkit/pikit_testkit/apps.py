"""The bundled Spark apps' entry modules (spark_apps/<app>.py), loaded by path as spark-submit runs them."""

from __future__ import annotations

from types import ModuleType

from pikit import REPO
from pikit_testkit.modules import from_file


def app_module(app: str) -> ModuleType:
    return from_file(f"pikit_app_{app}", REPO / "spark_apps" / f"{app}.py")
