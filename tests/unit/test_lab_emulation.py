"""The lab's qemu-user registration: systemd 257 in an emulated node needs binfmt flags POCF."""

from __future__ import annotations

from pathlib import Path

import pytest
from pikit_dev import lab_emulation

ENTRY = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: PF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""


def test_an_entry_without_open_binary_is_registered_again_with_the_same_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lab_emulation, "_BINFMT", tmp_path)
    entry = tmp_path / "qemu-aarch64"
    entry.write_text(ENTRY)
    assert lab_emulation._binfmt_field(entry, "flags:") == "PF"
    lab_emulation._register(entry)
    assert entry.read_text() == "-1", "the old entry is removed first"
    registered = (tmp_path / "register").read_text()
    name, kind, offset, magic, mask, interpreter, flags = registered.split(":")[1:]
    assert (name, kind, offset, interpreter, flags) == (
        "qemu-aarch64",
        "M",
        "0",
        "/usr/libexec/qemu-binfmt/aarch64-binfmt-P",
        "POCF",
    )
    assert magic == "".join(f"\\x{b:02x}" for b in bytes.fromhex("7f454c460201010000000000000000000200b700"))
    assert mask.startswith("\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00")
