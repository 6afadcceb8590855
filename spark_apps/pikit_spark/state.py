"""The shape of an app's state: tables of rows, each table described by a DDL string. Where it
is kept: pikit_spark/changelog.py (a compacted Kafka topic, written in each batch's transaction)."""

from __future__ import annotations

from typing import Any

TableRow = tuple[Any, ...]
Tables = dict[str, list[TableRow]]


def columns(ddl: str) -> list[str]:
    return [part.split()[0] for part in ddl.split(", ")]
