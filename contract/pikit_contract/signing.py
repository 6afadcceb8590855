"""Records bound to the device that sent them: a MAC per Kafka record, keyed per device.

The ACLs say which topic a device's certificate may write, not which `device` a record may
claim. So every record carries two headers: `pikit-signer`, the device id, and `pikit-mac`,

    HMAC-SHA256(device key, SHA-256(record value))

The device key is HMAC-SHA256(site secret, "pikit device key" NUL device id): the controller
keeps the site secret and hands each device only its own key, so a stolen device can sign
as itself and nothing else. The Spark apps hold the keys of the site's devices and check
each record before reading it (pikit_spark/readings.py, the same rules as `verdict` here).
A stolen device is revoked (playbooks/edge-revoke.yml): the brokers refuse its certificate,
and from its fence on (the readings topic's end offsets once the brokers refused it) a record
signed with its key is a dead letter `revoked`, whichever certificate wrote it. What it wrote
before the fence was written while it was trusted, and is read as before.
A device's records also belong in one partition of the readings topic, the one its agent's
producer puts them in (keyed by the device: `home_partition`). The apps keep each partition's
devices' state in that partition's task, so a record elsewhere, from another partitioner or from
a thief with a stolen key, would give its device a second state: it is a dead letter `misplaced`.
The MAC covers the digest, not the bytes, so that Spark computes the digest where the
record lies and the keyed part on 32 bytes. Besides the standard library, only kafka-python's
partitioner hash is used, the agent's own Kafka client: the agent runs on a Pi Zero without
extra wheels.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kafka.partitioner.default import murmur2

SIGNER_HEADER = "pikit-signer"
MAC_HEADER = "pikit-mac"
KEY_BYTES = 32
_KEY_LABEL = b"pikit device key\x00"

# Why a record is not taken as its device's. Stable texts, as the contract's reasons are.
UNSIGNED = "unsigned: no pikit-signer and pikit-mac headers"
UNKNOWN_SIGNER = "signed by a device this cluster holds no key for"
BAD_MAC = "signature does not match the record"
FORGED = "forged: signed by one device, claims another"
REVOKED = "revoked: signed with the key of a revoked device"
MISPLACED = "misplaced: not in its device's partition of the readings topic"

# A revoked device's fence: per partition of the readings topic, the first offset it no longer
# counts at. A partition missing from it was added later and holds nothing from before.
Fence = Mapping[int, int]


@dataclass(frozen=True)
class Keyring:
    """What the apps check records against: the devices' keys, and the fences of those revoked."""

    keys: Mapping[str, bytes]
    revoked: Mapping[str, Fence] = field(default_factory=dict)

    def is_revoked(self, signer: str, partition: int, offset: int) -> bool:
        fence = self.revoked.get(signer)
        return fence is not None and offset >= fence.get(partition, 0)

    def to_json(self) -> str:
        """The keyring file the spark role writes for each app (0640, never printed)."""
        return json.dumps(
            {
                "keys": {device: key.hex() for device, key in sorted(self.keys.items())},
                "revoked": {
                    device: {str(p): o for p, o in sorted(fence.items())}
                    for device, fence in sorted(self.revoked.items())
                },
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> Keyring:
        """The keyring file; a flat {device: key} (releases before revocation) has none revoked."""
        doc = json.loads(text)
        if "keys" not in doc:
            doc = {"keys": doc}
        return cls(
            {device: bytes.fromhex(key) for device, key in doc["keys"].items()},
            {
                device: {int(p): int(o) for p, o in fence.items()}
                for device, fence in doc.get("revoked", {}).items()
            },
        )


def device_key(site_secret: bytes, device: str) -> bytes:
    """The one key a device signs with, derived from the site's secret."""
    return hmac.new(site_secret, _KEY_LABEL + device.encode(), hashlib.sha256).digest()


def mac(key: bytes, value: bytes) -> bytes:
    return hmac.new(key, hashlib.sha256(value).digest(), hashlib.sha256).digest()


def headers(device: str, key: bytes, value: bytes) -> list[tuple[str, bytes]]:
    """The headers that bind `value` to `device`."""
    return [(SIGNER_HEADER, device.encode()), (MAC_HEADER, mac(key, value))]


def read_site_secret(path: str) -> bytes:
    """The site secret as the controller keeps it (pikit_device_signing_secret_file)."""
    with open(path, encoding="utf-8") as f:
        return f.read().split()[0].encode()


def read_key(path: str) -> bytes:
    """A device key file: the key as hex digits, as the edge_agent role writes it."""
    with open(path, encoding="ascii") as f:
        text = f.read().strip()
    key = bytes.fromhex(text)
    if len(key) != KEY_BYTES:
        raise ValueError(f"{path}: expected {KEY_BYTES * 2} hex digits, found {len(text)} characters")
    return key


def signer_of(record_headers: Iterable[tuple[str, bytes]] | None) -> tuple[str | None, bytes | None]:
    """(signer, mac) from a record's headers; the first of each when repeated."""
    signer: str | None = None
    tag: bytes | None = None
    for name, value in record_headers or ():
        if name == SIGNER_HEADER and signer is None:
            signer = bytes(value).decode("utf-8", "replace")
        elif name == MAC_HEADER and tag is None:
            tag = bytes(value)
    return signer, tag


def verdict(
    value: bytes,
    record_headers: Iterable[tuple[str, bytes]] | None,
    keys: Mapping[str, bytes] | Keyring,
    position: tuple[int, int] = (0, -1),
) -> tuple[str | None, str | None]:
    """(reason, signer): reason None when the record is validly signed by a known device that
    was not revoked at the record's `position` (partition, offset) in the readings topic.

    Whether the record's own `device` is its signer is decided once the record has been
    read (`forged_reason`): a record that is not JSON has no device to compare."""
    ring = keys if isinstance(keys, Keyring) else Keyring(keys)
    signer, tag = signer_of(record_headers)
    if signer is None or tag is None:
        return UNSIGNED, signer
    if ring.is_revoked(signer, *position):
        return naming(REVOKED, signer), signer
    key = ring.keys.get(signer)
    if key is None:
        return naming(UNKNOWN_SIGNER, signer), signer
    if not hmac.compare_digest(mac(key, value), tag):
        return naming(BAD_MAC, signer), signer
    return None, signer


def forged_reason(signer: str | None, device: str) -> str | None:
    """The dead letter's reason when a validly signed record claims another device."""
    return naming(FORGED, signer) if signer is not None and signer != device else None


def home_partition(device: str, partitions: int) -> int:
    """The readings partition of `device`'s records among `partitions`: where Kafka's default
    partitioner (murmur2 of the key, as the Java client and kafka-python hash it) puts a record
    keyed by the device, as the agent keys each of its records."""
    hashed: int = murmur2(device.encode())  # kafka-python ships no types
    return (hashed & 0x7FFFFFFF) % partitions


def misplaced_reason(signer: str | None, partition: int, partitions: int | None) -> str | None:
    """The dead letter's reason when a validly signed record of its signer lies outside the
    signer's home partition; None without a count of partitions to judge by."""
    if signer is None or not partitions or home_partition(signer, partitions) == partition:
        return None
    return naming(MISPLACED, signer)


def naming(reason: str, signer: str) -> str:
    """A reason with the device whose key signed (its certificate's principal is User:<signer>)."""
    return f"{reason} (signer: {signer})"
