"""The spark role's typed app options against each app's own command line: every option the role
sets is one the app knows, and every option the app requires is one the role sets."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml
from pikit_testkit.apps import app_module

REPO = Path(__file__).resolve().parents[3]
APPS = yaml.safe_load((REPO / "roles/spark/defaults/main.yml").read_text())["spark_apps"]
VARS = yaml.safe_load((REPO / "roles/spark/vars/main.yml").read_text())
# What roles/spark/vars/main.yml adds to every app's options, and to a streaming app's.
ROLE_OPTIONS = ["kafka_properties"]
STREAMING_OPTIONS = list(VARS["_spark_streaming_options"])


def app_options(app: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = app_module(app).options()
    return parser


def dests(parser: argparse.ArgumentParser, *, required: bool = False) -> set[str]:
    return {a.dest for a in parser._actions if a.option_strings and (a.required or not required)}


@pytest.mark.parametrize("app", sorted(APPS))
def test_the_role_sets_only_options_the_app_knows_and_every_one_it_requires(app: str) -> None:
    parser = app_options(app)
    streaming = APPS[app]["kind"] == "streaming"
    given = set(APPS[app]["options"]) | set(ROLE_OPTIONS) | (set(STREAMING_OPTIONS) if streaming else set())
    assert given - dests(parser) == set(), f"{app} has no such option"
    assert dests(parser, required=True) - given == set(), f"{app} requires these; the role does not set them"


def test_the_role_is_the_only_home_of_a_site_value() -> None:
    """spark_silent_after_seconds: the role's default, and no second default in the app."""
    parser = app_options("anomaly_alerts")
    [action] = [a for a in parser._actions if a.dest == "silent_after_seconds"]
    assert action.required and action.default is None
    assert APPS["anomaly_alerts"]["options"]["silent_after_seconds"] == "{{ spark_silent_after_seconds }}"
