"""The kafka role's filter plugins."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from tests.conftest import REPO


def load() -> ModuleType:
    path = REPO / "roles/kafka/filter_plugins/kafka_filters.py"
    spec = importlib.util.spec_from_file_location("kafka_filters", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


filters = load()


def test_scram_users_become_add_scram_arguments() -> None:
    # Each of these passwords was formatted into a real cluster by kafka-storage 4.3.
    users = [{"name": "dashboard", "password": "a b]=c[d"}, {"name": "etl", "password": "p" * 32}]
    assert filters.kafka_scram_format_args(users, 8192) == [
        "--add-scram", 'SCRAM-SHA-512=[name=dashboard,iterations=8192,password="a b]=c[d"]',
        "--add-scram", f'SCRAM-SHA-512=[name=etl,iterations=8192,password="{"p" * 32}"]',
    ]  # fmt: skip


def test_no_users_no_arguments() -> None:
    assert filters.kafka_scram_format_args([], 8192) == []


@pytest.mark.parametrize("password", ['a"b', "a,b"])
def test_a_comma_or_double_quote_is_refused_naming_the_user(password: str) -> None:
    with pytest.raises(ValueError, match="dashboard"):
        filters.kafka_scram_format_args([{"name": "dashboard", "password": password}], 8192)


def test_the_role_exposes_the_filter() -> None:
    assert "kafka_scram_format_args" in filters.FilterModule().filters()
