"""Records bound to their device: the keys, the MAC and every verdict."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
from edge_agent.config import ConfigError, parse
from pikit_contract import signing

SECRET = b"site secret"


def test_each_device_gets_its_own_key_from_the_site_secret() -> None:
    one, two = signing.device_key(SECRET, "edge-1"), signing.device_key(SECRET, "edge-2")
    assert len(one) == signing.KEY_BYTES and one != two
    assert one == signing.device_key(SECRET, "edge-1")
    assert one != signing.device_key(b"another site", "edge-1")


def test_the_mac_is_hmac_sha256_of_the_records_digest() -> None:
    key = signing.device_key(SECRET, "edge-1")
    want = hmac.new(key, hashlib.sha256(b"record").digest(), hashlib.sha256).digest()
    assert signing.headers("edge-1", key, b"record") == [("pikit-signer", b"edge-1"), ("pikit-mac", want)]


# Kafka's own test vectors for its partitioner's hash (Java's Utils.murmur2, as signed ints).
JAVA_MURMUR2 = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


def test_a_devices_home_partition_is_where_kafkas_default_partitioner_puts_its_key() -> None:
    # Modulo 2**31 the home is the positive hash itself: Java's toPositive(murmur2(key)).
    assert {k: signing.home_partition(k, 2**31) for k in JAVA_MURMUR2} == {
        k: h & 0x7FFFFFFF for k, h in JAVA_MURMUR2.items()
    }
    homes = [signing.home_partition(f"edge-{i}", 6) for i in range(60)]
    assert set(homes) == set(range(6))


def test_a_record_outside_its_signers_partition_is_misplaced() -> None:
    home = signing.home_partition("edge-1", 6)
    assert signing.misplaced_reason("edge-1", home, 6) is None
    assert signing.misplaced_reason("edge-1", (home + 1) % 6, 6) == f"{signing.MISPLACED} (signer: edge-1)"
    assert signing.misplaced_reason("edge-1", (home + 1) % 6, None) is None  # no count: not judged
    assert signing.misplaced_reason(None, 0, 6) is None  # unsigned: its own reason says so


def test_verdicts_name_the_signer() -> None:
    keys = {d: signing.device_key(SECRET, d) for d in ("edge-1", "edge-2")}
    good = signing.headers("edge-1", keys["edge-1"], b"v")
    assert signing.verdict(b"v", good, keys) == (None, "edge-1")
    assert signing.verdict(b"v2", good, keys) == (f"{signing.BAD_MAC} (signer: edge-1)", "edge-1")
    assert signing.verdict(b"v", None, keys) == (signing.UNSIGNED, None)
    assert signing.verdict(b"v", good[:1], keys) == (signing.UNSIGNED, "edge-1")
    stranger = signing.headers("edge-9", signing.device_key(SECRET, "edge-9"), b"v")
    assert signing.verdict(b"v", stranger, keys) == (f"{signing.UNKNOWN_SIGNER} (signer: edge-9)", "edge-9")
    assert signing.forged_reason("edge-1", "edge-2") == f"{signing.FORGED} (signer: edge-1)"
    assert signing.forged_reason("edge-1", "edge-1") is None


def test_a_key_file_holds_64_hex_digits(tmp_path: Path) -> None:
    path = tmp_path / "signing.key"
    path.write_text(signing.device_key(SECRET, "edge-1").hex() + "\n")
    assert signing.read_key(str(path)) == signing.device_key(SECRET, "edge-1")
    path.write_text("abcd\n")
    with pytest.raises(ValueError, match="expected 64 hex digits"):
        signing.read_key(str(path))


def test_the_config_names_the_key_file() -> None:
    doc = {
        "device_id": "edge-1",
        "kafka": {"bootstrap_servers": ["h:9092"], "signing_key_file": "/k"},
        "sensors": [{"type": "simulated"}],
    }
    assert parse(doc).kafka.signing_key_file == "/k"
    with pytest.raises(ConfigError, match=r"kafka\.signing_key_file: must be str"):
        parse({**doc, "kafka": {"bootstrap_servers": ["h:9092"], "signing_key_file": 1}})


def test_a_keyring_round_trips_and_reads_the_flat_form_of_earlier_releases() -> None:
    keys = {"edge-1": b"\x01" * 32, "edge-2": b"\x02" * 32}
    ring = signing.Keyring(keys, {"edge-2": {0: 4, 3: 0}})
    assert signing.Keyring.from_json(ring.to_json()) == ring
    flat = '{"edge-1": "' + "01" * 32 + '"}'
    assert signing.Keyring.from_json(flat) == signing.Keyring({"edge-1": b"\x01" * 32})


def test_a_revoked_signers_record_at_or_past_its_fence_is_refused_even_when_its_mac_holds() -> None:
    key = signing.device_key(b"s", "edge-1")
    good = signing.headers("edge-1", key, b"v")
    ring = signing.Keyring({"edge-1": key}, {"edge-1": {0: 10}})
    revoked = f"{signing.REVOKED} (signer: edge-1)"
    assert signing.verdict(b"v", good, ring, (0, 9)) == (None, "edge-1")
    assert signing.verdict(b"v", good, ring, (0, 10)) == (revoked, "edge-1")
    assert signing.verdict(b"v", good, ring, (1, 0)) == (revoked, "edge-1")  # a partition added since
    assert signing.verdict(b"v", good, {"edge-1": key}, (0, 10)) == (None, "edge-1")
