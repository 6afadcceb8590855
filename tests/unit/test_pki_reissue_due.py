"""lookup('pki_reissue_due'): when sign.yml issues a certificate again. The whole flow on a real
PKI the role makes is test_renewal.py (by age) and test_ca_rotation.py (by issuer)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import ModuleType

from pikit_testkit.certs import certificate, new_key, pem
from pikit_testkit.modules import from_file

from pikit import REPO


def load() -> ModuleType:
    return from_file("pki_reissue_due", REPO / "roles/pki/lookup_plugins/pki_reissue_due.py")


def test_a_certificate_is_due_inside_its_window_or_from_another_ca(tmp_path: Path) -> None:
    due = load().reissue_due
    ca_key, other_key = new_key(), new_key()
    ca, cert = tmp_path / "ca.crt", tmp_path / "node.crt"
    ca.write_bytes(pem(None, certificate("site CA", ca_key, "site CA", ca_key, ca=True, days=3650)))
    now = dt.datetime.now(dt.UTC)

    assert not due(cert, ca, 30, now), "none issued yet: signing makes it anyway"
    cert.write_bytes(pem(None, certificate("pi-1", new_key(), "site CA", ca_key, days=40)))
    assert not due(cert, ca, 30, now), "40 days left, renewed 30 days before"
    assert due(cert, ca, 30, now + dt.timedelta(days=11)), "29 days left"
    assert due(cert, ca, 100000, now), "a window longer than any lifetime renews everything"

    cert.write_bytes(pem(None, certificate("pi-1", new_key(), "old CA", other_key, days=400)))
    assert due(cert, ca, 30, now), "signed by a CA other than the signing one (a rotation promoted)"
