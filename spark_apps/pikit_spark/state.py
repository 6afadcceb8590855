"""State of our own, versioned per micro-batch on the shared storage: <root>/batch=<id>.json.

A batch reads the newest version before its id and writes its own. A batch that Spark
replays after a crash therefore reads the same version its first run read, and replaces
what that run may have written: the state never counts a batch twice.

The state is small (a row per device, per open window, per baseline key), so the driver
keeps it in memory and writes each version as one JSON file, atomically (written aside,
synced, renamed): a Spark job per table cost more than the whole file. Versions in the
layout of earlier releases (<root>/batch=<id>/<table>/, Parquet written by Spark) are
still read, so that an upgrade keeps its windows and baselines.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pikit_contract.disk import fsync_path
from pyspark.sql import DataFrame, SparkSession

TableRow = tuple[Any, ...]
Tables = dict[str, list[TableRow]]


def columns(ddl: str) -> list[str]:
    return [part.split()[0] for part in ddl.split(", ")]


class VersionedTables:
    def __init__(self, spark: SparkSession, root: str, schemas: dict[str, str], keep: int = 3) -> None:
        self.spark, self.root, self.schemas, self.keep = spark, Path(root), schemas, keep
        # The version this driver wrote last, and its file's stat when written: the next batch
        # reads it from memory, not from the shared disk (at 10,000 devices, tens of thousands
        # of rows to parse every batch). Any other version, or this one rewritten since, is read.
        self._written: tuple[Path, tuple[int, int], Tables] | None = None

    def _versions(self) -> dict[int, Path]:
        """Each complete version: a JSON file, or a directory of the older Parquet layout."""
        found: dict[int, Path] = {}
        for path in self.root.glob("batch=*") if self.root.exists() else []:
            name = path.name.removesuffix(".json")
            if not name.split("=", 1)[1].isdigit():
                continue  # a file being written, under its temporary name
            complete = path.is_file() or all((path / table / "_SUCCESS").exists() for table in self.schemas)
            if complete:
                found[int(name.split("=", 1)[1])] = path
        return found

    def versions(self) -> list[int]:
        return sorted(self._versions())

    def before(self, batch_id: int) -> Tables:
        """The newest version before `batch_id`, as rows in each schema's column order."""
        older = {v: path for v, path in self._versions().items() if v < batch_id}
        if not older:
            return {name: [] for name in self.schemas}
        path = older[max(older)]
        if self._written is not None and self._written[0] == path and self._written[1] == _stamp(path):
            return {name: list(rows) for name, rows in self._written[2].items()}
        if path.is_file():
            stored = json.loads(path.read_text())
            # A table that a later release added starts empty.
            return {name: [tuple(row) for row in stored.get(name, [])] for name in self.schemas}
        tables = {name: self.spark.read.parquet(str(path / name)) for name in self.schemas}
        return {
            name: [tuple(r) for r in tables[name].select(*columns(ddl)).collect()]
            for name, ddl in self.schemas.items()
        }

    def frame(self, name: str, rows: list[TableRow]) -> DataFrame:
        return self.spark.createDataFrame(rows, self.schemas[name])

    def write(self, batch_id: int, tables: Tables) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / f"batch={batch_id}.json"
        aside = self.root / f".batch={batch_id}.json.tmp"
        with aside.open("w") as out:
            json.dump({name: tables[name] for name in self.schemas}, out, separators=(",", ":"))
            out.flush()
            os.fsync(out.fileno())
        aside.replace(target)
        fsync_path(self.root)
        kept = {name: [tuple(row) for row in tables[name]] for name in self.schemas}
        self._written = (target, _stamp(target), kept)
        versions = self._versions()
        for old in [v for v in sorted(versions) if v < batch_id][: -self.keep]:
            _remove(versions[old])


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def _remove(path: Path) -> None:
    if path.is_file():
        path.unlink()
        return
    for item in sorted(path.rglob("*"), reverse=True):
        item.unlink() if item.is_file() else item.rmdir()
    path.rmdir()
