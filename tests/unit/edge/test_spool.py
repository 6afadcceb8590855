"""The spool: order, acknowledgement, bounds, and survival of crashes mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from edge_agent.spool import Spool

from pikit import REPO


def fill(spool: Spool, seqs: range, size: int = 40) -> list[int]:
    accepted = []
    for seq in seqs:
        if spool.append(seq, f"{seq:08d}".encode().ljust(size, b".")):
            accepted.append(seq)
    return accepted


def test_fifo_order_and_commit(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync="never", max_bytes=4096, segment_bytes=1024)
    fill(spool, range(50))
    first = spool.read(10)
    assert [r.seq for r in first] == list(range(10))
    assert [r.seq for r in spool.read(10, after=first[-1].index)] == list(range(10, 20))
    spool.commit(first[-1].index)
    assert spool.depth == 40
    assert [r.seq for r in spool.read(100)] == list(range(10, 50))


def test_reopen_keeps_unacknowledged_and_the_sequence(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync="always", max_bytes=4096, segment_bytes=1024)
    fill(spool, range(30))
    spool.commit(spool.read(12)[-1].index)
    spool.close()
    again = Spool(tmp_path, fsync="always", max_bytes=4096, segment_bytes=1024)
    assert [r.seq for r in again.read(100)] == list(range(12, 30))
    assert again.high_seq == 29
    again.commit(again.read(100)[-1].index)
    again.close()
    empty = Spool(tmp_path, max_bytes=4096, segment_bytes=1024)
    assert empty.depth == 0
    assert empty.high_seq == 29, "the highest sequence survives a drained spool"


def test_committed_segments_are_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync="never", max_bytes=4096, segment_bytes=1024)
    fill(spool, range(60))
    assert len(list(tmp_path.glob("seg-*.log"))) > 1
    spool.commit(spool.read(1000)[-1].index)
    assert len(list(tmp_path.glob("seg-*.log"))) == 1


def test_drop_oldest_policy_counts_what_it_drops(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync="never", full_policy="drop_oldest", max_bytes=4096, segment_bytes=1024)
    accepted = fill(spool, range(200))
    assert accepted == list(range(200))
    kept = [r.seq for r in spool.read(1000)]
    assert spool.size_bytes <= 4096
    assert kept == list(range(200 - len(kept), 200)), "the newest are kept, in order"
    assert spool.dropped == 200 - len(kept)


def test_stop_sampling_policy_refuses_and_counts(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync="never", full_policy="stop_sampling", max_bytes=4096, segment_bytes=1024)
    accepted = fill(spool, range(200))
    assert accepted == list(range(len(accepted)))
    assert spool.refused == 200 - len(accepted)
    spool.commit(spool.read(1000)[-1].index)
    assert spool.append(999, b"room again")


def test_a_torn_tail_is_cut_back_to_the_last_whole_record(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync="always", max_bytes=4096, segment_bytes=1024)
    fill(spool, range(10))
    spool.close()
    tail = sorted(tmp_path.glob("seg-*.log"))[-1]
    with tail.open("ab") as handle:
        handle.write(b"\x30\x00\x00\x00garbage-half-frame")
    again = Spool(tmp_path, fsync="always", max_bytes=4096, segment_bytes=1024)
    assert again.repaired_bytes > 0
    assert [r.seq for r in again.read(100)] == list(range(10))
    assert again.append(10, b"next")
    assert [r.seq for r in again.read(100)][-1] == 10


def test_a_corrupt_byte_in_the_tail_is_detected(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync="always", max_bytes=4096, segment_bytes=1024)
    fill(spool, range(5))
    spool.close()
    tail = sorted(tmp_path.glob("seg-*.log"))[-1]
    data = bytearray(tail.read_bytes())
    data[-3] ^= 0xFF
    tail.write_bytes(bytes(data))
    again = Spool(tmp_path, max_bytes=4096, segment_bytes=1024)
    assert [r.seq for r in again.read(100)] == [0, 1, 2, 3]


WRITER = """
import sys
from pathlib import Path
from edge_agent.spool import Spool
spool = Spool(Path(sys.argv[1]), fsync=sys.argv[2], max_bytes=1 << 26, segment_bytes=1 << 20)
seq = spool.high_seq + 1
print("ready", flush=True)
while True:
    spool.append(seq, (b"%012d" % seq) * 20)
    seq += 1
"""


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_kill_9_mid_write_never_corrupts_or_reorders(tmp_path: Path, fsync: str) -> None:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'edge_agent'}:{REPO}"}
    for _round in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), fsync], stdout=subprocess.PIPE, env=env
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        spool = Spool(tmp_path, max_bytes=1 << 26, segment_bytes=1 << 20)
        records = spool.read(10**7)
        seqs = [r.seq for r in records]
        # Gapless and ordered (the bound may have dropped the oldest segments, never a middle).
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert seqs[0] == 0 or spool.committed >= 0
        assert all(r.payload == (b"%012d" % r.seq) * 20 for r in records)
        spool.close()
    assert len(seqs) > 100
