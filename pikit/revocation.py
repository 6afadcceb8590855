"""Revoked devices, as the controller records them (`<pikit_state_dir>/revoked-devices.json`).

    python -m pikit.revocation revoke --record FILE --device edge-7 [--certificate FILE]
    python -m pikit.revocation fence --record FILE --device edge-7 --fence '{"0": 812, "1": 790}'
    python -m pikit.revocation restore --record FILE --device edge-7

playbooks/edge-revoke.yml runs these; every other playbook only reads the record (the kafka role's
deny ACLs, the keyring each Spark app checks records against), so that no later run lets a revoked
device back in. A record is {device: {revoked_at, fence, serial}}: the fence is the readings
topic's end offsets once every broker refused the device (pikit_contract/signing.py), the serial names
the certificate it held. A revocation is recorded before the brokers are told, its fence after they
all refuse the device: one whose fence is null (a run that stopped in between) is denied by the
brokers and not yet known to the apps, and the next run of the playbook sets its fence. The file is
0600: it names the site's devices.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from pikit_contract.signing import Keyring, device_key


@dataclass(frozen=True)
class Revocation:
    revoked_at: str  # UTC, ISO 8601
    fence: dict[str, int] | None  # readings topic partition (as text) -> first offset refused
    serial: str  # the revoked certificate's serial number (hex), "" when the controller has no copy


def load(record: Path) -> dict[str, Revocation]:
    if not record.exists():
        return {}
    doc = json.loads(record.read_text())
    return {device: Revocation(**entry) for device, entry in doc.items()}


def save(record: Path, revoked: dict[str, Revocation]) -> None:
    """Atomically, 0600: a crash leaves the old record or the new one, never half of one."""
    record.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({device: asdict(r) for device, r in sorted(revoked.items())}, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(dir=record.parent, prefix=f".{record.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).replace(record)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def keyring(secret: bytes, devices: list[str], revoked: dict[str, Revocation]) -> Keyring:
    """What records are checked against (the Spark apps' keyring, `pikit status`): every device's
    key, a revoked one's too (for what it wrote before its fence), and the fences. A revocation
    whose fence is still pending is left to the brokers' deny until it has one."""
    names = sorted(set(devices) | set(revoked))
    fences = {
        device: {int(p): int(o) for p, o in r.fence.items()}
        for device, r in revoked.items()
        if r.fence is not None  # pending: the next edge-revoke.yml run sets it
    }
    return Keyring({device: device_key(secret, device) for device in names}, fences)


def serial_of(certificate: Path) -> str:
    if not certificate.exists():
        return ""
    return format(x509.load_pem_x509_certificate(certificate.read_bytes()).serial_number, "x")


def revoke(record: Path, device: str, certificate: Path | None) -> bool:
    """Record `device` as revoked, its fence yet to come; False when it already was."""
    revoked = load(record)
    if device in revoked:
        return False
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    serial = serial_of(certificate) if certificate else ""
    revoked[device] = Revocation(now, None, serial)
    save(record, revoked)
    return True


def set_fence(record: Path, device: str, fence: dict[str, int]) -> bool:
    """Set a recorded revocation's fence; False when it had one (the first fence stands)."""
    revoked = load(record)
    if device not in revoked:
        raise SystemExit(f"{device} is not recorded as revoked in {record}")
    if revoked[device].fence is not None:
        return False
    revoked[device] = replace(revoked[device], fence={str(p): int(o) for p, o in fence.items()})
    save(record, revoked)
    return True


def restore(record: Path, device: str) -> bool:
    """Take `device` off the record; False when it was not on it."""
    revoked = load(record)
    if revoked.pop(device, None) is None:
        return False
    save(record, revoked)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pikit.revocation", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["revoke", "fence", "restore"])
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--fence", default="{}", help="JSON {partition: end offset} (fence)")
    parser.add_argument("--certificate", type=Path, help="the device's certificate (revoke)")
    args = parser.parse_args(argv)
    if args.action == "revoke":
        changed = revoke(args.record, args.device, args.certificate)
    elif args.action == "fence":
        changed = set_fence(args.record, args.device, json.loads(args.fence))
    else:
        changed = restore(args.record, args.device)
    print(json.dumps({"changed": changed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
