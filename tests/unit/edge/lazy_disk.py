"""An in-memory disk that keeps only what was fsynced, for power-cut tests of the spool.

The model is the strict one of Jepsen's LazyFS and of ALICE: a file's content survives a
power cut as of its last fsync, and a directory entry (create, rename, unlink) only once
its directory was fsynced. After every operation that changes anything, `on_step` gets
the disk, so a test can take the crash images of that boundary:

- "power": what a power cut leaves (fsynced content, fsynced entries);
- "torn": a power cut in the middle of writing back the last file written: its fsynced
  content plus half of what was appended to it since;
- "process": a crash of the process alone (the page cache survives).

`capacity` bounds the bytes of all files, to stage a full disk (ENOSPC, short writes).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class _Inode:
    data: bytearray
    durable: bytes = b""


class LazyDisk:
    def __init__(self, capacity: int = 1 << 40) -> None:
        self.capacity = capacity
        self.inodes: dict[int, _Inode] = {}
        self.names: dict[str, int] = {}
        self.durable_names: dict[str, int] = {}
        self.fds: dict[int, int] = {}
        self.last_written: int | None = None
        self.on_step: Callable[[LazyDisk], None] | None = None
        self._next = 1

    # -- crash images -------------------------------------------------------

    def image(self, kind: str) -> LazyDisk:
        """A new disk holding what a crash of `kind` (power, torn, process) leaves."""
        out = LazyDisk(self.capacity)
        names = self.names if kind == "process" else self.durable_names
        for name, ino in names.items():
            inode = self.inodes[ino]
            content = bytes(inode.data) if kind == "process" else inode.durable
            if kind == "torn" and ino == self.last_written and inode.data.startswith(inode.durable):
                pending = len(inode.data) - len(inode.durable)
                content = bytes(inode.data[: len(inode.durable) + pending // 2])
            out.inodes[ino] = _Inode(bytearray(content), content)
            out.names[name] = out.durable_names[name] = ino
        out._next = self._next
        return out

    def _step(self) -> None:
        if self.on_step is not None:
            self.on_step(self)

    def _used(self) -> int:
        return sum(len(self.inodes[i].data) for i in set(self.names.values()))

    def _inode(self, path: Path) -> _Inode:
        try:
            return self.inodes[self.names[str(path)]]
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path)) from None

    def _create(self, path: Path) -> int:
        ino = self.names.get(str(path))
        if ino is None:
            ino, self._next = self._next, self._next + 1
            self.inodes[ino] = _Inode(bytearray())
            self.names[str(path)] = ino
        return ino

    # -- the Disk interface --------------------------------------------------

    def listdir(self, directory: Path) -> list[str]:
        prefix = f"{directory}/"
        return [name[len(prefix) :] for name in self.names if name.startswith(prefix)]

    def mkdir(self, directory: Path) -> None:
        pass

    def read(self, path: Path, offset: int = 0, length: int = -1) -> bytes:
        data = self._inode(path).data
        return bytes(data[offset:] if length < 0 else data[offset : offset + length])

    def open_append(self, path: Path) -> int:
        ino = self._create(path)
        fd = max(self.fds, default=2) + 1
        self.fds[fd] = ino
        self._step()
        return fd

    def write(self, fd: int, data: bytes) -> int:
        room = self.capacity - self._used()
        if room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        taken = data[:room]
        self.inodes[self.fds[fd]].data += taken
        self.last_written = self.fds[fd]
        self._step()
        return len(taken)

    def fsync(self, fd: int) -> None:
        inode = self.inodes[self.fds[fd]]
        inode.durable = bytes(inode.data)
        self._step()

    def ftruncate(self, fd: int, size: int) -> None:
        del self.inodes[self.fds[fd]].data[size:]
        self._step()

    def close(self, fd: int) -> None:
        del self.fds[fd]

    def truncate(self, path: Path, size: int) -> None:
        inode = self._inode(path)
        del inode.data[size:]
        inode.durable = bytes(inode.data)
        self._step()

    def write_synced(self, path: Path, data: bytes) -> None:
        inode = self.inodes[self._create(path)]
        if self._used() - len(inode.data) + len(data) > self.capacity:
            raise OSError(errno.ENOSPC, "No space left on device")
        inode.data = bytearray(data)
        self._step()  # written, not yet synced
        inode.durable = bytes(data)
        self._step()

    def sync_file(self, path: Path) -> None:
        inode = self._inode(path)
        inode.durable = bytes(inode.data)
        self._step()

    def replace(self, source: Path, target: Path) -> None:
        self.names[str(target)] = self.names.pop(str(source))
        self._step()

    def unlink(self, path: Path) -> None:
        self.names.pop(str(path), None)
        self._step()

    def fsync_dir(self, directory: Path) -> None:
        self.durable_names = dict(self.names)
        self._step()
