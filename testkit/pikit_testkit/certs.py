"""Throwaway certificates for tests and benchmarks (rogue CAs, loopback brokers).

The kit's own certificates come from the `pki` role only; this is for the places
that need a certificate the kit must *not* have made, or a broker outside the lab.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def certificate(
    cn: str, key: Any, issuer: str, signer: Any, *, ca: bool = False, days: int = 2, ip: str | None = None
) -> x509.Certificate:
    """A certificate for `key` with subject CN `cn`, signed by `signer` as `issuer`."""
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ip:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(signer, hashes.SHA256())


def pem(key: Any = None, *certs: x509.Certificate) -> bytes:
    """PKCS#8 key (if any) followed by the certificates: the kit's PEM bundle layout."""
    out = b""
    if key is not None:
        encoding, fmt = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
        out += key.private_bytes(encoding, fmt, serialization.NoEncryption())
    return out + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
