"""The file operations the spool makes, in one small interface.

Production uses `Disk` (the real file system). The spool's crash-consistency test swaps
in a disk that keeps only what was fsynced (tests/unit/edge/lazy_disk.py), and cuts the
power at every write and fsync the spool makes.
"""

from __future__ import annotations

import os
from pathlib import Path


class Disk:
    def listdir(self, directory: Path) -> list[str]:
        return [entry.name for entry in directory.iterdir()]

    def mkdir(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)

    def read(self, path: Path, offset: int = 0, length: int = -1) -> bytes:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    def open_append(self, path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(self, fd: int, data: bytes) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)

    def truncate(self, path: Path, size: int) -> None:
        """Cut a file to `size` bytes, durably."""
        with path.open("r+b") as handle:
            handle.truncate(size)
            os.fsync(handle.fileno())

    def write_synced(self, path: Path, data: bytes) -> None:
        """Create or replace `path`'s content and fsync it (not its directory entry)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def sync_file(self, path: Path) -> None:
        fsync_path(path)

    def replace(self, source: Path, target: Path) -> None:
        source.replace(target)

    def unlink(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def fsync_dir(self, directory: Path) -> None:
        fsync_path(directory)


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by name (a directory's fsync makes its entries durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
