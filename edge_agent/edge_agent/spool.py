"""A bounded, crash-safe, on-disk FIFO of readings between the sensors and Kafka.

Layout of the spool directory:

    seg-<first index, 20 digits>.log   frames, appended in order
    commit                             JSON: last acknowledged index and highest seq ever spooled

A frame is `length u32 | crc32 u32 | index u64 | seq u64 | payload`, the CRC covering
index, seq and payload. Indexes rise strictly through the spool (a damaged frame or a
power cut may leave holes; nothing relies on them being contiguous).

What a power cut can and cannot do (proven by tests/unit/edge/test_spool_crash.py, which
cuts the power at every write and fsync of a recorded workload on a disk that keeps
only what was fsynced, the method of ALICE and of Jepsen's LazyFS):

- A reading is *durable* once an fsync covered it. `read()` hands out durable readings
  only, so nothing reaches Kafka that a power cut could take back. Hence no reading
  Kafka acknowledged is lost, the commit never points past what is on disk, and a `seq`
  is never handed out twice (`high_seq` after a restart is at least every seq sent).
- No durable reading is lost, unless Kafka acknowledged it or a full spool dropped it
  (counted in `dropped`).
- Opening the spool keeps every frame whose CRC is right: a torn or corrupt tail is cut
  off; a damaged frame inside a segment is skipped, the valid frames after it are kept,
  and the readings it held are counted in `damaged`.
- After opening, new readings are appended after everything kept or acknowledged and
  survive the next restart like any other.

Durability policy (`fsync`): "always" fsyncs every append (no reading a sensor handed
over is lost; one fsync per reading, slow on SD cards); "interval" fsyncs at most every
`fsync_interval` seconds, so a power cut loses at most the readings of that window and
a reading waits up to that long before it is sent; a crash of the agent alone loses
nothing (the page cache survives it). "never" leaves it to the kernel and treats every
append as durable: it gives no power-cut guarantee. The commit file is always replaced
atomically and fsynced.

Bound (`max_bytes`): when the next frame would not fit, policy "drop_oldest" deletes
the oldest segment (its unsent readings are counted in `dropped`), and "stop_sampling"
refuses the append (counted in `refused`). A full disk (ENOSPC) is not the bound: under
"drop_oldest" it frees the oldest segment and tries again; otherwise, or when nothing is
left to free, the append is refused and counted in `disk_full`. Either way the partial
frame is taken back, so a full disk never corrupts the spool.
"""

from __future__ import annotations

import errno
import json
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from pikit_contract.disk import Disk

_HEADER = struct.Struct("<IIQQ")  # length of payload, crc32, index, seq
MAX_PAYLOAD = 1 << 20  # a reading's JSON is far smaller; a larger length field is damage
FSYNC_POLICIES = ("always", "interval", "never")
FULL_POLICIES = ("drop_oldest", "stop_sampling")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


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
    frames: int = 0


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
        disk: Disk | None = None,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}")
        if full_policy not in FULL_POLICIES:
            raise ValueError(f"full_policy must be one of {FULL_POLICIES}")
        if segment_bytes * 2 > max_bytes:
            raise ValueError("max_bytes must hold at least two segments")
        self.dir = directory
        self.disk = disk or Disk()
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self.full_policy = full_policy
        self.dropped = 0  # unsent readings deleted by drop_oldest (bound or full disk)
        self.refused = 0  # appends refused by stop_sampling at the bound
        self.disk_full = 0  # appends refused because the disk was full and nothing could be freed
        self.damaged = 0  # unsent readings lost to damaged frames found when opening
        self.repaired_bytes = 0
        self._lock = threading.Lock()
        self._last_sync = time.monotonic()
        self._segments: list[_Segment] = []
        self._cursor: tuple[int, Path | None, int] = (-1, None, 0)  # next index, its segment, offset
        self._writer: int | None = None
        self.disk.mkdir(self.dir)
        commit = self._read_commit()
        self.committed: int = commit.get("index", -1)
        self.high_seq: int = commit.get("high_seq", -1)
        self._recover()

    # -- opening ------------------------------------------------------------

    def _read_commit(self) -> dict[str, int]:
        try:
            data = json.loads(self.disk.read(self.dir / "commit"))
            return {"index": int(data["index"]), "high_seq": int(data["high_seq"])}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError) as exc:
            # The commit file is replaced atomically, so this is outside damage: say so, keep data.
            raise RuntimeError(
                f"{self.dir / 'commit'} is unreadable ({exc}); move it away to resend everything spooled"
            ) from exc

    def _recover(self) -> None:
        names = sorted(n for n in self.disk.listdir(self.dir) if n.startswith("seg-"))
        for leftover in (n for n in names if n.endswith(".repair")):  # a repair cut short
            self.disk.unlink(self.dir / leftover)
        last = self.committed
        for name in (n for n in names if n.endswith(".log")):
            first = int(name[4:-4])
            segment = _Segment(self.dir / name, first, first - 1, 0)
            last = self._scan(segment, after=last)
            self._segments.append(segment)
        self._next_index = last + 1
        self._durable = last
        self._delete_committed_segments()

    def _scan(self, segment: _Segment, after: int) -> int:
        """Index a segment, keeping every valid frame past index `after`; returns the last index."""
        data = self.disk.read(segment.path)
        kept: list[tuple[int, int]] = []  # (start, end) of each frame kept
        offset = valid_end = 0
        damage_at = -1  # offset of the first damaged byte, if any
        while offset + _HEADER.size <= len(data):
            frame = _valid_frame(data, offset)
            if frame is None:
                damage_at = offset if damage_at < 0 else damage_at
                offset += 1  # look for the next valid frame
                continue
            end, index, seq = frame
            start, offset, valid_end = offset, end, end
            if index <= after:
                continue  # acknowledged before (a segment whose deletion a power cut undid)
            # Readings between two kept frames were in damaged bytes. A hole below the
            # commit is not a loss: Kafka acknowledged those readings before a power cut.
            self.damaged += max(0, index - max(after, self.committed) - 1)
            kept.append((start, end))
            after = segment.last = index
            segment.frames += 1
            self.high_seq = max(self.high_seq, seq)
        if 0 <= damage_at < valid_end:  # damage inside: rewrite the segment with its kept frames
            body = b"".join(data[start:end] for start, end in kept)
            self.repaired_bytes += len(data) - len(body)
            repair = segment.path.with_suffix(".repair")
            self.disk.write_synced(repair, body)
            self.disk.replace(repair, segment.path)
            self.disk.fsync_dir(self.dir)
            segment.size = len(body)
            return after
        if valid_end < len(data):  # a torn tail: cut it off
            self.repaired_bytes += len(data) - valid_end
            self.disk.truncate(segment.path, valid_end)
        elif kept and self.fsync != "never":
            # What a crashed agent left in the page cache is made durable before it is sent.
            self.disk.sync_file(segment.path)
        segment.size = valid_end
        return after

    # -- writing ------------------------------------------------------------

    def append(self, seq: int, payload: bytes) -> bool:
        """Spool one reading; False when it was refused (full spool or full disk, both counted)."""
        frame_size = _HEADER.size + len(payload)
        with self._lock:
            while self._bytes() + frame_size > self.max_bytes:
                if self.full_policy == "stop_sampling" or len(self._segments) <= 1:
                    self.refused += 1
                    return False
                self._drop_oldest_segment()
            index = self._next_index
            body = struct.pack("<QQ", index, seq) + payload
            frame = struct.pack("<II", len(payload), zlib.crc32(body)) + body
            while True:
                try:
                    self._write_frame(frame)
                    break
                except OSError as exc:
                    if exc.errno not in _DISK_FULL:
                        raise
                    if self.full_policy != "drop_oldest" or len(self._segments) <= 1:
                        self.disk_full += 1
                        return False
                    self._drop_oldest_segment()
            segment = self._segments[-1]
            segment.last = index
            segment.frames += 1
            self._next_index += 1
            self.high_seq = max(self.high_seq, seq)
            if self.fsync == "never":
                self._durable = index
            elif self.fsync == "always" or time.monotonic() - self._last_sync >= self.fsync_interval:
                self._sync()
            return True

    def _write_frame(self, frame: bytes) -> None:
        segment = self._writable_segment(len(frame))
        assert self._writer is not None
        try:
            written = self.disk.write(self._writer, frame)
            if written != len(frame):
                raise OSError(errno.ENOSPC, "short write")
        except OSError:
            # Disk full or failing: take back whatever part of the frame landed.
            self.disk.ftruncate(self._writer, segment.size)
            raise
        segment.size += len(frame)

    def _writable_segment(self, frame_size: int) -> _Segment:
        tail = self._segments[-1] if self._segments else None
        if tail is None or (tail.size + frame_size > self.segment_bytes and tail.size > 0):
            self._close_writer()
            path = self.dir / f"seg-{self._next_index:020d}.log"
            tail = _Segment(path, self._next_index, self._next_index - 1, 0)
            self._segments.append(tail)
        if self._writer is None:
            self._writer = self.disk.open_append(tail.path)
            self.disk.fsync_dir(self.dir)
        return tail

    def _sync(self) -> None:
        """Make every appended reading durable (and so eligible to be sent)."""
        if self._writer is not None and self.fsync != "never":
            self.disk.fsync(self._writer)
        self._last_sync = time.monotonic()
        self._durable = self._next_index - 1

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._sync()  # a closed segment is durable whole: only the tail may hold undurable frames
            self.disk.close(self._writer)
            self._writer = None

    def _drop_oldest_segment(self) -> None:
        oldest = self._segments.pop(0)
        self.dropped += _unsent(oldest, self.committed)
        self.committed = max(self.committed, oldest.last)
        # Unlink first: on a full disk the new commit file needs the space. Should the power
        # fail in between, the next start finds the hole and counts it as lost.
        self.disk.unlink(oldest.path)
        self._write_commit()

    # -- reading and acknowledging -------------------------------------------

    def read(self, max_records: int, after: int | None = None) -> list[Record]:
        """Up to `max_records` durable records after index `after` (default: after the commit).

        Readings appended since the last fsync are synced first when `fsync_interval` has
        passed; otherwise they wait for the next read (they are not durable yet).
        """
        start = (self.committed if after is None else after) + 1
        out: list[Record] = []
        with self._lock:
            if self._durable < self._next_index - 1 and (
                time.monotonic() - self._last_sync >= self.fsync_interval
            ):
                self._sync()
            durable = self._durable
            segments = [(s.path, s.size) for s in self._segments if s.last >= start]
            cursor = self._cursor
        for path, size in segments:
            # Resume where the last read stopped instead of rescanning the segment.
            offset = cursor[2] if cursor[0] == start and cursor[1] == path and not out else 0
            data = self.disk.read(path, offset, size - offset)
            pos = 0
            while pos + _HEADER.size <= len(data) and len(out) < max_records:
                length, _crc, index, seq = _HEADER.unpack_from(data, pos)
                if index > durable:
                    break
                end = pos + _HEADER.size + length
                if index >= start:
                    out.append(Record(index, seq, data[pos + _HEADER.size : end]))
                pos = end
            if out:
                with self._lock:
                    self._cursor = (out[-1].index + 1, path, offset + pos)
            if len(out) >= max_records or (out and out[-1].index >= durable):
                break
        return out

    def commit(self, index: int) -> None:
        """Kafka acknowledged every record up to `index`: forget them."""
        with self._lock:
            if index <= self.committed:
                return
            self.committed = index
            try:
                self._write_commit()
            except OSError as exc:
                if exc.errno not in _DISK_FULL:
                    raise
                # A full disk must not keep acknowledged readings from being forgotten: delete
                # their segments first (a power cut before the commit lands only turns them
                # into a hole, which the next start counts as damaged), then commit.
                self._delete_committed_segments()
                self._write_commit()
            self._delete_committed_segments()

    def _write_commit(self) -> None:
        tmp = self.dir / "commit.tmp"
        self.disk.write_synced(tmp, json.dumps({"index": self.committed, "high_seq": self.high_seq}).encode())
        self.disk.replace(tmp, self.dir / "commit")
        self.disk.fsync_dir(self.dir)

    def _delete_committed_segments(self) -> None:
        while len(self._segments) > 1 and self._segments[0].last <= self.committed:
            self.disk.unlink(self._segments.pop(0).path)

    # -- state ----------------------------------------------------------------

    def _bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def depth(self) -> int:
        """Readings spooled and not yet acknowledged."""
        with self._lock:
            return sum(_unsent(s, self.committed) for s in self._segments)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes()

    def counters(self) -> dict[str, int]:
        """Readings lost or refused, by reason (for the agent's metrics)."""
        return {
            "oldest": self.dropped,
            "refused": self.refused,
            "disk_full": self.disk_full,
            "damaged": self.damaged,
        }

    def close(self) -> None:
        with self._lock:
            self._close_writer()


def _valid_frame(data: bytes, offset: int) -> tuple[int, int, int] | None:
    """(end, index, seq) of a whole frame at `offset` whose CRC holds; None for damage."""
    length, crc, index, seq = _HEADER.unpack_from(data, offset)
    end = offset + _HEADER.size + length
    if length > MAX_PAYLOAD or end > len(data):
        return None
    if zlib.crc32(data[offset + 8 : end]) != crc:
        return None
    return end, index, seq


def _unsent(segment: _Segment, committed: int) -> int:
    """Readings of `segment` past the commit (exact when the commit is outside it)."""
    if segment.last <= committed:
        return 0
    if segment.first > committed:
        return segment.frames
    # The commit falls inside: indexes rise by one except across holes, which are rare.
    return min(segment.frames, segment.last - committed)
