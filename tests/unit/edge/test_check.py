"""`edge-agent check`'s certificate checks: chain, key match, expiry, CN."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from edge_agent.cli import check_certificates
from edge_agent.config import parse


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _cert(cn: str, key: Any, issuer: str, signer: Any, days: int = 90) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=days))
        .sign(signer, hashes.SHA256())
    )


def _files(tmp_path: Path, cert: x509.Certificate, key: Any, ca: x509.Certificate) -> dict[str, str]:
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "edge.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        + cert.public_bytes(serialization.Encoding.PEM)
    )
    return {"ca_file": str(tmp_path / "ca.crt"), "cert_file": str(tmp_path / "edge.pem")}


def _problems(tmp_path: Path, cert: x509.Certificate, key: Any, ca: x509.Certificate) -> list[str]:
    config = parse(
        {
            "device_id": "edge-1",
            "kafka": {"bootstrap_servers": ["127.0.0.1:9092"], **_files(tmp_path, cert, key, ca)},
            "sensors": [{"type": "system"}],
        }
    )
    return check_certificates(config)


CA_KEY = _key()
CA = _cert("test CA", CA_KEY, "test CA", CA_KEY, days=3650)
KEY = _key()


def test_a_good_certificate_passes(tmp_path: Path) -> None:
    assert _problems(tmp_path, _cert("edge-1", KEY, "test CA", CA_KEY), KEY, CA) == []


def test_each_problem_is_named(tmp_path: Path) -> None:
    other_key = _key()
    assert "does not belong" in _problems(tmp_path, _cert("edge-1", KEY, "test CA", CA_KEY), other_key, CA)[0]
    rogue = _key()
    assert "not issued by the CA" in _problems(tmp_path, _cert("edge-1", KEY, "test CA", rogue), KEY, CA)[0]
    assert (
        "within 30 days" in _problems(tmp_path, _cert("edge-1", KEY, "test CA", CA_KEY, days=5), KEY, CA)[0]
    )
    assert (
        "differs from device_id" in _problems(tmp_path, _cert("edge-2", KEY, "test CA", CA_KEY), KEY, CA)[0]
    )
