"""`edge-agent check`'s certificate checks: chain, key match, expiry, CN."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_agent.cli import check_certificates
from edge_agent.config import parse
from pikit_testkit.certs import certificate, new_key, pem


def _files(tmp_path: Path, cert: Any, key: Any, ca: Any) -> dict[str, str]:
    cas = ca if isinstance(ca, list) else [ca]
    (tmp_path / "ca.crt").write_bytes(b"".join(pem(None, c) for c in cas))
    (tmp_path / "edge.pem").write_bytes(pem(key, cert))
    return {"ca_file": str(tmp_path / "ca.crt"), "cert_file": str(tmp_path / "edge.pem")}


def _problems(tmp_path: Path, cert: Any, key: Any, ca: Any) -> list[str]:
    config = parse(
        {
            "device_id": "edge-1",
            "kafka": {"bootstrap_servers": ["127.0.0.1:9092"], **_files(tmp_path, cert, key, ca)},
            "sensors": [{"type": "system"}],
        }
    )
    return check_certificates(config)


CA_KEY = new_key()
CA = certificate("test CA", CA_KEY, "test CA", CA_KEY, ca=True, days=3650)
KEY = new_key()


def test_a_good_certificate_passes(tmp_path: Path) -> None:
    assert _problems(tmp_path, certificate("edge-1", KEY, "test CA", CA_KEY, days=90), KEY, CA) == []


def test_each_problem_is_named(tmp_path: Path) -> None:
    other_key = new_key()
    assert (
        "does not belong"
        in _problems(tmp_path, certificate("edge-1", KEY, "test CA", CA_KEY, days=90), other_key, CA)[0]
    )
    rogue = new_key()
    assert (
        "not issued by a CA"
        in _problems(tmp_path, certificate("edge-1", KEY, "test CA", rogue, days=90), KEY, CA)[0]
    )
    assert (
        "within 30 days"
        in _problems(tmp_path, certificate("edge-1", KEY, "test CA", CA_KEY, days=5), KEY, CA)[0]
    )
    assert (
        "differs from device_id"
        in _problems(tmp_path, certificate("edge-2", KEY, "test CA", CA_KEY, days=90), KEY, CA)[0]
    )


def test_a_trust_bundle_of_two_cas_passes_a_certificate_of_either(tmp_path: Path) -> None:
    """During a CA rotation ca_file holds the signing CA and the one it replaces or will replace."""
    new_ca_key = new_key()
    new_ca = certificate("test CA 2", new_ca_key, "test CA 2", new_ca_key, ca=True, days=3650)
    by_new = certificate("edge-1", KEY, "test CA 2", new_ca_key, days=90)
    by_old = certificate("edge-1", KEY, "test CA", CA_KEY, days=90)
    assert _problems(tmp_path, by_new, KEY, [CA, new_ca]) == []
    assert _problems(tmp_path, by_old, KEY, [new_ca, CA]) == []
    assert "not issued by a CA" in _problems(tmp_path, by_new, KEY, [CA])[0]
