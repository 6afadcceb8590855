"""The certificate expiry report over a PKI directory laid out as the pki role lays it out."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from pikit_testkit.certs import certificate, new_key, pem

from pikit import revocation
from pikit.certs import inventory, main
from tests.conftest import run_playbook


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    ca_key = new_key()
    (tmp_path / "issued").mkdir()
    (tmp_path / "clients").mkdir()
    (tmp_path / "ca.crt").write_bytes(
        pem(None, certificate("lab CA", ca_key, "lab CA", ca_key, ca=True, days=3650))
    )
    for path, cn, days in [
        ("issued/pi-1-kafka.crt", "pi-1", 400),
        ("issued/edge-1-edge-agent.crt", "edge-1", 10),
        ("clients/admin.crt", "admin", 2),
    ]:
        (tmp_path / path).write_bytes(pem(None, certificate(cn, new_key(), "lab CA", ca_key, days=days)))
    return tmp_path


def test_every_certificate_with_its_kind_and_status(pki: Path) -> None:
    certs = inventory(pki, renew_before_days=30)
    assert [(c.kind, c.subject, c.status) for c in certs] == [
        ("client", "admin", "renew at the next run"),
        ("device", "edge-1", "renew at the next run"),
        ("node", "pi-1", "ok"),
        ("ca", "lab CA", "ok"),
    ]
    assert certs[0].days_left in (1, 2)


def test_an_expired_certificate_fails_the_report(pki: Path, capsys: pytest.CaptureFixture[str]) -> None:
    later = datetime.now(UTC) + timedelta(days=20)
    assert [(c.subject, c.status) for c in inventory(pki, 30, now=later)][:3] == [
        ("admin", "expired"),
        ("edge-1", "expired"),
        ("pi-1", "ok"),
    ]
    assert main(["--pki", str(pki), "--json"]) == 0
    assert {c["subject"] for c in json.loads(capsys.readouterr().out)} == {
        "admin",
        "edge-1",
        "pi-1",
        "lab CA",
    }
    ca_key = new_key()
    expired = certificate("old", new_key(), "lab CA", ca_key, days=0)  # not valid after its making
    (pki / "clients/old.crt").write_bytes(pem(None, expired))
    assert inventory(pki, 30)[0].status == "expired"
    assert main(["--pki", str(pki)]) == 1


def test_a_revoked_devices_certificate_says_so_and_asks_for_nothing(
    pki: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = pki.parent / "revoked-devices.json"
    revocation.revoke(record, "edge-1", pki / "issued/edge-1-edge-agent.crt")
    when = revocation.load(record)["edge-1"].revoked_at
    later = datetime.now(UTC) + timedelta(days=20)  # past its expiry: revoked, not expired
    found = {c.subject: c.status for c in inventory(pki, 30, now=later, revoked=revocation.load(record))}
    assert found["edge-1"] == f"revoked {when}"
    assert main(["--pki", str(pki)]) == 0
    assert f"revoked {when}" in capsys.readouterr().out
    # A certificate issued to the same name after the revocation is not the one revoked.
    ca_key = new_key()
    (pki / "issued/edge-1-edge-agent.crt").write_bytes(
        pem(None, certificate("edge-1", new_key(), "lab CA", ca_key, days=400))
    )
    reissued = inventory(pki, 30, revoked=revocation.load(record))
    assert {c.subject: c.status for c in reissued}["edge-1"] == "ok"


def test_a_directory_without_a_ca_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--pki", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


def test_the_playbook_reports_them_without_touching_a_host(pki: Path, tmp_path: Path) -> None:
    (tmp_path / "pki").symlink_to(pki)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"ansible_port": 1, "pikit_state_dir": str(tmp_path)},
                    "hosts": {"pi-1": {"ansible_host": "127.0.0.11"}},
                }
            }
        )
    )
    code, out = run_playbook(inventory, "certs.yml")
    assert code == 0 and "UNREACHABLE" not in out, out[-2000:]
    assert "edge-1" in out and "renew at the next run" in out


def test_a_rotation_shows_both_cas(pki: Path) -> None:
    (pki / "ca-next").mkdir()
    key = new_key()
    (pki / "ca-next" / "ca.crt").write_bytes(
        pem(None, certificate("lab CA 2", key, "lab CA 2", key, ca=True))
    )
    kinds = {(c.kind, c.subject, c.file) for c in inventory(pki, renew_before_days=30)}
    assert ("ca, staged", "lab CA 2", "ca-next/ca.crt") in kinds
    assert ("ca", "lab CA", "ca.crt") in kinds
