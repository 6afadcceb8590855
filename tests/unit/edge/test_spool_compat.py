"""A spool written by an earlier release opens under this one with every reading kept.

An agent upgrade (playbooks/edge-upgrade.yml) starts the new release on the old one's
spool, and a rollback starts the old release on whatever the new one left. The fixture
directory is a spool exactly as release 0.1.0 left it (60 readings in three 2 KiB
segments, the first 25 acknowledged); it is never regenerated. A release that changes
the on-disk format must keep reading it, or migrate it on open, and add its own fixture
here so that the next release is held to it too. 0.2.0 writes version 2 of the reading
contract but spools what 0.1.0 spooled (version 1 bodies), so that a rollback to 0.1.0
sends what 0.2.0 left: no fixture of its own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from edge_agent.spool import Spool
from pikit_contract.readings import decode_batch, envelopes

FIXTURES = Path(__file__).parent / "fixtures"
RELEASES = sorted(p.name.removeprefix("spool-") for p in FIXTURES.glob("spool-*"))


@pytest.mark.parametrize("release", RELEASES)
def test_an_earlier_releases_spool_opens_with_every_unsent_reading(tmp_path: Path, release: str) -> None:
    spool_dir = tmp_path / "spool"
    shutil.copytree(FIXTURES / f"spool-{release}", spool_dir)
    spool = Spool(spool_dir, max_bytes=8192, segment_bytes=2048, fsync="always")
    assert (spool.committed, spool.high_seq) == (24, 59)
    records = spool.read(1000)
    assert [r.seq for r in records] == list(range(25, 60)), "every unacknowledged reading, in order"
    for record in records:
        body = json.loads(record.payload)
        assert body["seq"] == record.seq and body["value"] == pytest.approx(20 + record.seq / 10)
    # Sent by this release in its own version of the contract, each one readable.
    sent = [r for value in envelopes("edge-1", records, size=10) for r in decode_batch(value)]
    assert [r.seq for r in sent] == list(range(25, 60))
    assert spool.counters() == {"oldest": 0, "refused": 0, "disk_full": 0, "damaged": 0}
    assert spool.repaired_bytes == 0, "an intact spool is not rewritten"


def test_the_current_release_appends_after_an_earlier_releases_readings(tmp_path: Path) -> None:
    """Sequence numbers carry on from the old spool, and the mixed spool survives a restart."""
    spool_dir = tmp_path / "spool"
    shutil.copytree(FIXTURES / f"spool-{RELEASES[0]}", spool_dir)
    spool = Spool(spool_dir, max_bytes=8192, segment_bytes=2048, fsync="always")
    assert spool.append(spool.high_seq + 1, b'{"seq":60}')
    spool.close()
    reopened = Spool(spool_dir, max_bytes=8192, segment_bytes=2048, fsync="always")
    assert [r.seq for r in reopened.read(1000)] == list(range(25, 61))
    assert reopened.high_seq == 60
