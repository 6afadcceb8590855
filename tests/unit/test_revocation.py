"""The controller's record of revoked devices (pikit/revocation.py) and how certs.py shows it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from pikit import revocation


def test_a_revocation_is_recorded_then_fenced_once_and_restored(tmp_path: Path) -> None:
    record = tmp_path / "state" / "revoked-devices.json"
    assert revocation.revoke(record, "edge-7", None) is True
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert revocation.load(record)["edge-7"].fence is None
    assert revocation.revoke(record, "edge-7", None) is False  # already recorded
    assert revocation.set_fence(record, "edge-7", {"0": 5, "2": 9}) is True
    assert revocation.set_fence(record, "edge-7", {"0": 50}) is False  # the first fence stands
    assert revocation.load(record)["edge-7"].fence == {"0": 5, "2": 9}
    assert revocation.restore(record, "edge-7") is True
    assert revocation.restore(record, "edge-7") is False
    assert revocation.load(record) == {}
    with pytest.raises(SystemExit, match="edge-8 is not recorded"):
        revocation.set_fence(record, "edge-8", {"0": 1})


def test_the_cli_says_whether_it_changed_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "revoked-devices.json"
    args = ["--record", str(record), "--device", "edge-7"]
    for action, extra, changed in [
        ("revoke", [], True),
        ("revoke", [], False),
        ("fence", ["--fence", '{"0": 3}'], True),
        ("restore", [], True),
    ]:
        assert revocation.main([action, *args, *extra]) == 0
        assert json.loads(capsys.readouterr().out) == {"changed": changed}
