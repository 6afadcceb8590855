"""The Parquet output's retention: whole dates of per-minute windows, deleted once rolled up.

sensor_aggregates writes its windows under `<output>/aggregates/date=YYYY-MM-DD/batch=N/`;
daily_rollup pools them into `<output>/daily/date=YYYY-MM-DD/`. A date older than the
retention loses its windows, never its daily row: a date is deleted only when the daily
table holds it, read back after the roll-up wrote it. Plain file operations on the shared
storage (no Spark job): the driver sees the same path the executors write.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DATE_PREFIX = "date="


@dataclass(frozen=True)
class Expired:
    """One date of windows past the retention."""

    date: str
    path: Path
    files: int
    bytes: int


@dataclass(frozen=True)
class RetentionReport:
    deleted: list[Expired]
    # Past the retention but not in the daily table: kept, and named, until a roll-up holds it.
    kept_not_rolled_up: list[str]

    def summary(self, keep_days: int, table: Path) -> str:
        if not self.deleted and not self.kept_not_rolled_up:
            return f"retention {keep_days} days: nothing older in {table}"
        parts = []
        if self.deleted:
            dates = [e.date for e in self.deleted]
            span = dates[0] if len(dates) == 1 else f"{dates[0]}..{dates[-1]}"
            parts.append(
                f"deleted {len(dates)} dates ({span}): {sum(e.files for e in self.deleted)} files, "
                f"{sum(e.bytes for e in self.deleted)} bytes from {table}"
            )
        if self.kept_not_rolled_up:
            parts.append(
                f"kept {', '.join(self.kept_not_rolled_up)}: past the retention but not in the daily table"
            )
        return f"retention {keep_days} days: " + "; ".join(parts)


def cutoff(today: dt.date, keep_days: int) -> dt.date:
    """The oldest date kept: today and the `keep_days - 1` whole days before it."""
    return today - dt.timedelta(days=keep_days - 1)


def expired(table: Path, keep_days: int, today: dt.date) -> list[Expired]:
    """The date partitions of `table` older than the retention, oldest first."""
    if keep_days <= 0 or not table.is_dir():
        return []
    oldest_kept = cutoff(today, keep_days)
    out = []
    for part in sorted(table.iterdir()):
        if not part.is_dir() or not part.name.startswith(DATE_PREFIX):
            continue
        try:
            day = dt.date.fromisoformat(part.name.removeprefix(DATE_PREFIX))
        except ValueError:
            continue  # not a partition Spark wrote: not ours to delete
        if day < oldest_kept:
            files = [f for f in part.rglob("*") if f.is_file()]
            out.append(Expired(day.isoformat(), part, len(files), sum(f.stat().st_size for f in files)))
    return out


def apply(table: Path, keep_days: int, today: dt.date, rolled_up: Iterable[str]) -> RetentionReport:
    """Delete the expired dates of `table` that the daily table holds; report what went."""
    held = set(rolled_up)
    deleted, kept = [], []
    for old in expired(table, keep_days, today):
        if old.date in held:
            shutil.rmtree(old.path)
            deleted.append(old)
        else:
            kept.append(old.date)
    return RetentionReport(deleted, kept)
