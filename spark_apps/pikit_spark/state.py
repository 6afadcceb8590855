"""State of our own, versioned per micro-batch on the shared storage: <root>/batch=<id>/<table>/.

A batch reads the newest complete version before its id and writes its own. A batch that
Spark replays after a crash therefore reads the same version its first run read, and
overwrites what that run may have written: the state never counts a batch twice. The
anomaly baseline and the per-device windows both keep their state this way.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession


class VersionedTables:
    def __init__(self, spark: SparkSession, root: str, schemas: dict[str, str], keep: int = 3) -> None:
        self.spark, self.root, self.schemas, self.keep = spark, Path(root), schemas, keep

    def _complete(self, version: Path) -> bool:
        return all((version / name / "_SUCCESS").exists() for name in self.schemas)

    def versions(self) -> list[int]:
        if not self.root.exists():
            return []
        return sorted(int(p.name.split("=", 1)[1]) for p in self.root.glob("batch=*") if self._complete(p))

    def before(self, batch_id: int) -> dict[str, DataFrame]:
        older = [v for v in self.versions() if v < batch_id]
        if not older:
            return {name: self.spark.createDataFrame([], ddl) for name, ddl in self.schemas.items()}
        version = self.root / f"batch={older[-1]}"
        return {name: self.spark.read.parquet(str(version / name)) for name in self.schemas}

    def write(self, batch_id: int, tables: dict[str, DataFrame]) -> None:
        for name in self.schemas:
            tables[name].coalesce(1).write.mode("overwrite").parquet(
                str(self.root / f"batch={batch_id}" / name)
            )
        for old in [v for v in self.versions() if v < batch_id][: -self.keep]:
            directory = self.root / f"batch={old}"
            for path in sorted(directory.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            directory.rmdir()
