"""Every certificate the kit's PKI holds, with its expiry: the CA, nodes, devices, clients.

    python -m pikit.certs --pki <pikit_state_dir>/pki [--renew-before-days 30] [--json]

Reads the controller's copies (`<pki>/ca.crt`, `issued/<host>-<name>.crt` for nodes and
devices, `clients/<cn>.crt`), which are what the nodes were given. A certificate inside the
renewal window is issued again by the next run of the playbook that made it; an expired
one makes the exit status 1. `playbooks/certs.yml` runs this with the inventory's settings.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

from pikit import revocation

DEVICE_CERT_NAME = "edge-agent"  # the edge_agent role's pki_cert_name


@dataclass(frozen=True)
class Certificate:
    kind: str  # ca | node | device | client
    subject: str
    file: str
    not_after: str
    days_left: int
    status: str  # ok | renew at the next run | expired | CA expiring: rotate it | revoked <when>


def kind_of(pki: Path, path: Path) -> str:
    if path == pki / "ca.crt":
        return "ca"
    if path.parent.name in ("ca-next", "ca-retiring"):
        return "ca, staged" if path.parent.name == "ca-next" else "ca, retiring"
    if path.parent.name == "clients":
        return "client"
    return "device" if path.stem.endswith(f"-{DEVICE_CERT_NAME}") else "node"


def inventory(
    pki: Path,
    renew_before_days: int,
    now: datetime | None = None,
    revoked: Mapping[str, revocation.Revocation] | None = None,
) -> list[Certificate]:
    """The certificates, each with its status; a revoked device's (pikit/revocation.py, matched by
    its serial) says so instead of asking for renewal."""
    now = now or datetime.now(UTC)
    revoked = revoked or {}
    paths = [
        pki / "ca.crt",
        pki / "ca-next" / "ca.crt",
        pki / "ca-retiring" / "ca.crt",
        *sorted((pki / "issued").glob("*.crt")),
        *sorted((pki / "clients").glob("*.crt")),
    ]
    found = []
    for path in (p for p in paths if p.exists()):
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        left = cert.not_valid_after_utc - now
        kind = kind_of(pki, path)
        subject = str(names[0].value) if names else cert.subject.rfc4514_string()
        shut_out = revoked.get(subject) if kind == "device" else None
        if shut_out is not None and shut_out.serial in ("", format(cert.serial_number, "x")):
            status = f"revoked {shut_out.revoked_at}"
        elif left.total_seconds() <= 0:
            status = "expired"
        elif left.days < renew_before_days and not kind.startswith("ca"):
            status = "renew at the next run"
        elif kind.startswith("ca") and left.days < renew_before_days:
            status = "CA expiring: rotate it"
        else:
            status = "ok"
        found.append(
            Certificate(
                kind,
                subject,
                str(path.relative_to(pki)),
                cert.not_valid_after_utc.strftime("%Y-%m-%d %H:%M UTC"),
                left.days,
                status,
            )
        )
    return sorted(found, key=lambda c: (c.days_left, c.kind, c.subject))


def table(certs: list[Certificate]) -> str:
    rows = [("kind", "subject", "expires", "days left", "status", "file")]
    rows += [(c.kind, c.subject, c.not_after, str(c.days_left), c.status, c.file) for c in certs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pki", type=Path, required=True, help="the controller's pki_dir")
    parser.add_argument("--renew-before-days", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--revoked", type=Path, help="the revoked devices' record (default: revoked-devices.json by --pki)"
    )
    args = parser.parse_args(argv)
    if not (args.pki / "ca.crt").exists():
        print(f"{args.pki}: no ca.crt here (is this the inventory's pki_dir?)", file=sys.stderr)
        return 2
    record = args.revoked or args.pki.parent / "revoked-devices.json"
    certs = inventory(args.pki, args.renew_before_days, revoked=revocation.load(record))
    print(json.dumps([asdict(c) for c in certs], indent=2) if args.json else table(certs))
    return 1 if any(c.status == "expired" for c in certs) else 0


if __name__ == "__main__":
    sys.exit(main())
