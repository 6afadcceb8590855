"""Power cuts at every write and fsync boundary of a recorded spool workload.

A disk that keeps only what was fsynced (lazy_disk.py) records the spool's operations; at
each boundary the test takes what a power cut, a torn write-back and a process crash
would leave, opens the spool on it, and checks the guarantees written at the top of
spool.py: no durable reading lost, no `seq` handed out twice, valid frames kept, and new
readings safe across the next restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from edge_agent.spool import Spool

from tests.unit.edge.lazy_disk import LazyDisk

DIR = Path("/spool")
SIZES = {"max_bytes": 4096, "segment_bytes": 512}


def payload(seq: int) -> bytes:
    return f"reading-{seq:06d}".encode().ljust(40, b".")


class Clock:
    """The spool's monotonic clock, advanced by the workload: "interval" becomes deterministic."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Boundary:
    images: dict[str, LazyDisk]
    appended: list[int]  # appends that returned True
    sent: list[int]  # handed out by read(): Kafka may hold them


def record_workload(fsync: str, clock: Clock) -> list[Boundary]:
    disk = LazyDisk()
    appended: list[int] = []
    sent: list[int] = []
    boundaries: list[Boundary] = []
    disk.on_step = lambda d: boundaries.append(
        Boundary({k: d.image(k) for k in ("power", "torn", "process")}, list(appended), list(sent))
    )
    spool = Spool(DIR, fsync=fsync, fsync_interval=1.0, disk=disk, **SIZES)  # type: ignore[arg-type]
    for seq in range(40):
        clock.now += 0.3
        assert spool.append(seq, payload(seq))
        appended.append(seq)
        if seq % 7 == 6:
            sent.extend(r.seq for r in spool.read(5, after=max(sent, default=-1)))
        if seq % 11 == 10 and sent:
            spool.commit(max(sent))  # index == seq here: the spool starts empty
    spool.close()
    return boundaries


def reopen(disk: LazyDisk, fsync: str) -> Spool:
    return Spool(DIR, fsync=fsync, fsync_interval=1.0, disk=disk, **SIZES)  # type: ignore[arg-type]


@pytest.mark.parametrize("fsync", ["always", "interval"])
def test_no_power_cut_loses_a_durable_reading_or_reuses_a_seq(
    fsync: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr("edge_agent.spool.time.monotonic", clock)
    boundaries = record_workload(fsync, clock)
    states = 0
    for step, boundary in enumerate(boundaries):
        for kind, image in boundary.images.items():
            states += 1
            where = f"{kind} cut after operation {step}"
            spool = reopen(image, fsync)
            records = spool.read(10**6)
            got = [r.seq for r in records]
            assert got == sorted(set(got)), f"{where}: out of order or twice: {got}"
            assert all(r.payload == payload(r.seq) for r in records), f"{where}: damaged payload"
            # Readings handed to the sender were durable; with "always" so was every append;
            # a process crash loses nothing. Only what Kafka acknowledged may be gone.
            must_keep = boundary.sent
            if fsync == "always" or kind == "process":
                must_keep = boundary.appended
            lost = [s for s in must_keep if s > spool.committed and s not in got]
            assert not lost, f"{where}: lost {lost}"
            assert spool.high_seq >= max(boundary.sent, default=-1), f"{where}: a sent seq would be reused"

            # New readings after the cut survive the next clean restart (they used to be cut
            # off as a torn write when the commit had reached the disk before the frames).
            nxt = spool.high_seq + 1
            for seq in range(nxt, nxt + 3):
                clock.now += 0.3
                assert spool.append(seq, payload(seq))
            spool.close()
            again = [r.seq for r in reopen(image, fsync).read(10**6)]
            assert again == [*got, nxt, nxt + 1, nxt + 2], f"{where}: {again}"
    print(f"{fsync}: {len(boundaries)} boundaries, {states} crash states checked")
    assert len(boundaries) > 50


def test_a_damaged_frame_in_an_older_segment_keeps_the_valid_ones_and_counts_its_loss(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync="always", **SIZES)  # type: ignore[arg-type]
    for seq in range(30):
        assert spool.append(seq, payload(seq))
    spool.close()
    oldest = sorted(tmp_path.glob("seg-*.log"))[0]
    data = bytearray(oldest.read_bytes())
    frame = len(data) // 8  # 8 frames of equal size per segment
    data[2 * frame + 30] ^= 0xFF  # one payload byte of the third reading
    oldest.write_bytes(bytes(data))

    again = Spool(tmp_path, fsync="always", **SIZES)  # type: ignore[arg-type]
    assert [r.seq for r in again.read(100)] == [s for s in range(30) if s != 2]
    assert again.damaged == 1
    assert again.counters()["damaged"] == 1
    assert again.append(30, payload(30))
    again.close()
    assert [r.seq for r in Spool(tmp_path, fsync="always", **SIZES).read(100)][-2:] == [29, 30]  # type: ignore[arg-type]


def test_a_full_disk_frees_the_oldest_under_drop_oldest_and_never_corrupts() -> None:
    disk = LazyDisk(capacity=1500)
    spool = Spool(DIR, fsync="always", full_policy="drop_oldest", disk=disk, **SIZES)  # type: ignore[arg-type]
    for seq in range(200):
        assert spool.append(seq, payload(seq)), "drop_oldest makes room on a full disk"
    assert spool.dropped > 0 and spool.disk_full == 0 and spool.refused == 0
    spool.close()
    got = [r.seq for r in reopen(disk, "always").read(10**6)]
    assert got == list(range(200 - len(got), 200)), "the newest are kept, whole and in order"
    assert spool.dropped == 200 - len(got)


def test_a_full_disk_under_stop_sampling_is_counted_apart_from_the_bound() -> None:
    disk = LazyDisk(capacity=1500)
    spool = Spool(DIR, fsync="always", full_policy="stop_sampling", disk=disk, **SIZES)  # type: ignore[arg-type]
    accepted = [seq for seq in range(100) if spool.append(seq, payload(seq))]
    assert accepted == list(range(len(accepted)))
    assert spool.disk_full == 100 - len(accepted) > 0
    assert spool.refused == 0, "the bound (max_bytes) was never reached: the disk was"
    spool.commit(accepted[-1])
    assert spool.append(100, payload(100)), "acknowledged segments free the disk again"
    spool.close()
    assert [r.seq for r in reopen(disk, "always").read(10**6)] == [100]
