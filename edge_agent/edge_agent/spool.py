"""A bounded, crash-safe, on-disk FIFO of readings between the sensors and Kafka.

Layout of the spool directory:

    seg-<first index, 20 digits>.log   frames, appended in order
    commit                             JSON: last acknowledged index and highest seq ever spooled

A frame is `length u32 | crc32 u32 | index u64 | seq u64 | payload`, the CRC covering
index, seq and payload. Opening the spool truncates a torn or corrupt tail (a crash
or power cut mid-write) back to the last whole frame, so a spool is never left
corrupt. A reading leaves the spool only when `commit()` says Kafka acknowledged it.

Durability (`fsync`): "always" fsyncs every append (no acknowledged-by-sensor reading
is lost on power cut; one fsync per reading, slow on SD cards); "interval" fsyncs at
most every `fsync_interval` seconds (a power cut loses at most that window; a crash
of the agent alone loses nothing, the page cache survives it); "never" leaves it to
the kernel. The commit file is always replaced atomically and fsynced.

Bound (`max_bytes`): when the next frame would not fit, policy "drop_oldest" deletes
the oldest segment (its unsent readings are counted in `dropped`), and "stop_sampling"
refuses the append (the caller pauses its sensors; the refusal is counted).
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

_HEADER = struct.Struct("<IIQQ")  # length of payload, crc32, index, seq
FSYNC_POLICIES = ("always", "interval", "never")
FULL_POLICIES = ("drop_oldest", "stop_sampling")


@dataclass(frozen=True)
class Record:
    index: int
    seq: int
    payload: bytes


@dataclass
class _Segment:
    path: Path
    first: int
    last: int  # last index in it; first - 1 when empty
    size: int


class Spool:
    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        segment_bytes: int = 4 * 1024 * 1024,
        fsync: str = "interval",
        fsync_interval: float = 1.0,
        full_policy: str = "drop_oldest",
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}")
        if full_policy not in FULL_POLICIES:
            raise ValueError(f"full_policy must be one of {FULL_POLICIES}")
        if segment_bytes * 2 > max_bytes:
            raise ValueError("max_bytes must hold at least two segments")
        self.dir = directory
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self.full_policy = full_policy
        self.dropped = 0
        self.refused = 0
        self.repaired_bytes = 0
        self._lock = threading.Lock()
        self._last_sync = time.monotonic()
        self._segments: list[_Segment] = []
        self._cursor: tuple[int, Path | None, int] = (-1, None, 0)  # next index, its segment, offset
        self._writer: int | None = None
        self.dir.mkdir(parents=True, exist_ok=True)
        commit = self._read_commit()
        self.committed: int = commit.get("index", -1)
        self.high_seq: int = commit.get("high_seq", -1)
        self._recover()

    # -- opening ------------------------------------------------------------

    def _read_commit(self) -> dict[str, int]:
        try:
            data = json.loads((self.dir / "commit").read_text())
            return {"index": int(data["index"]), "high_seq": int(data["high_seq"])}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError) as exc:
            # The commit file is replaced atomically, so this is outside damage: say so, keep data.
            raise RuntimeError(
                f"{self.dir / 'commit'} is unreadable ({exc}); move it away to resend everything spooled"
            ) from exc

    def _recover(self) -> None:
        paths = sorted(self.dir.glob("seg-*.log"))
        for path in paths:
            first = int(path.stem.split("-")[1])
            segment = _Segment(path, first, first - 1, 0)
            if self._scan(segment, is_tail=path == paths[-1]):
                self._segments.append(segment)
        if self._segments:
            self._next_index = self._segments[-1].last + 1
        else:
            self._next_index = self.committed + 1
        self._next_index = max(self._next_index, self.committed + 1)
        self._delete_committed_segments()

    def _scan(self, segment: _Segment, is_tail: bool) -> bool:
        """Index a segment, repairing a torn tail; False when the segment had to be set aside."""
        data = segment.path.read_bytes()
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, crc, index, seq = _HEADER.unpack_from(data, offset)
            end = offset + _HEADER.size + length
            body = data[offset + 8 : end]
            if end > len(data) or zlib.crc32(body) != crc or index != segment.last + 1:
                break
            segment.last = index
            self.high_seq = max(self.high_seq, seq)
            offset = end
        if offset < len(data):
            # A torn write at the tail (crash, power cut, full disk): cut it off. Anywhere
            # else it is damage from outside; the rest of that segment cannot be trusted.
            self.repaired_bytes += len(data) - offset
            with segment.path.open("r+b") as handle:
                handle.truncate(offset)
                os.fsync(handle.fileno())
            if not is_tail:
                segment.path.rename(segment.path.with_suffix(".damaged"))
                return False
        segment.size = offset
        return True

    # -- writing ------------------------------------------------------------

    def append(self, seq: int, payload: bytes) -> bool:
        """Spool one reading; False when it was refused because the spool is full."""
        frame_size = _HEADER.size + len(payload)
        with self._lock:
            while self._bytes() + frame_size > self.max_bytes:
                if self.full_policy == "stop_sampling" or len(self._segments) <= 1:
                    self.refused += 1
                    return False
                self._drop_oldest_segment()
            segment = self._writable_segment(frame_size)
            index = self._next_index
            body = struct.pack("<QQ", index, seq) + payload
            frame = struct.pack("<II", len(payload), zlib.crc32(body)) + body
            assert self._writer is not None
            try:
                written = os.write(self._writer, frame)
                if written != len(frame):
                    raise OSError(28, "short write")
            except OSError:
                # Disk full or failing: take back whatever part of the frame landed.
                os.ftruncate(self._writer, segment.size)
                raise
            segment.size += len(frame)
            segment.last = index
            self._next_index += 1
            self.high_seq = max(self.high_seq, seq)
            self._maybe_sync()
            return True

    def _writable_segment(self, frame_size: int) -> _Segment:
        tail = self._segments[-1] if self._segments else None
        if tail is None or (tail.size + frame_size > self.segment_bytes and tail.size > 0):
            self._close_writer(sync=True)
            path = self.dir / f"seg-{self._next_index:020d}.log"
            tail = _Segment(path, self._next_index, self._next_index - 1, 0)
            self._segments.append(tail)
        if self._writer is None:
            self._writer = os.open(tail.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            _fsync_dir(self.dir)
        return tail

    def _maybe_sync(self) -> None:
        if self._writer is None or self.fsync == "never":
            return
        now = time.monotonic()
        if self.fsync == "always" or now - self._last_sync >= self.fsync_interval:
            os.fsync(self._writer)
            self._last_sync = now

    def _close_writer(self, sync: bool) -> None:
        if self._writer is not None:
            if sync and self.fsync != "never":
                os.fsync(self._writer)
            os.close(self._writer)
            self._writer = None

    def _drop_oldest_segment(self) -> None:
        oldest = self._segments.pop(0)
        unsent = oldest.last - max(self.committed, oldest.first - 1)
        self.dropped += max(unsent, 0)
        self.committed = max(self.committed, oldest.last)
        self._write_commit()
        oldest.path.unlink()

    # -- reading and acknowledging -------------------------------------------

    def read(self, max_records: int, after: int | None = None) -> list[Record]:
        """Up to `max_records` records after index `after` (default: after the commit)."""
        start = (self.committed if after is None else after) + 1
        out: list[Record] = []
        with self._lock:
            segments = [(s.path, s.size) for s in self._segments if s.last >= start]
            cursor = self._cursor
        for path, size in segments:
            # Resume where the last read stopped instead of rescanning the segment.
            offset = cursor[2] if cursor[0] == start and cursor[1] == path and not out else 0
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read(size - offset)
            pos = 0
            while pos + _HEADER.size <= len(data) and len(out) < max_records:
                length, _crc, index, seq = _HEADER.unpack_from(data, pos)
                end = pos + _HEADER.size + length
                if index >= start:
                    out.append(Record(index, seq, data[pos + _HEADER.size : end]))
                pos = end
            if out:
                with self._lock:
                    self._cursor = (out[-1].index + 1, path, offset + pos)
            if len(out) >= max_records:
                break
        return out

    def commit(self, index: int) -> None:
        """Kafka acknowledged every record up to `index`: forget them."""
        with self._lock:
            if index <= self.committed:
                return
            self.committed = index
            self._write_commit()
            self._delete_committed_segments()

    def _write_commit(self) -> None:
        tmp = self.dir / "commit.tmp"
        with tmp.open("w") as handle:
            json.dump({"index": self.committed, "high_seq": self.high_seq}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.dir / "commit")
        _fsync_dir(self.dir)

    def _delete_committed_segments(self) -> None:
        while len(self._segments) > 1 and self._segments[0].last <= self.committed:
            self._segments.pop(0).path.unlink()

    # -- state ----------------------------------------------------------------

    def _bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def depth(self) -> int:
        """Readings spooled and not yet acknowledged."""
        with self._lock:
            return max(0, self._next_index - 1 - self.committed)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes()

    def close(self) -> None:
        with self._lock:
            self._close_writer(sync=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
