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


CONF = (
    r":qemu-{name}:M::\x7f\x45\x4c\x46\x02\x01:\xff\xff\xff\xff\xff\xff:"
    "/usr/libexec/qemu-binfmt/{name}-binfmt-P:OPF\n"
)


def test_an_entry_update_binfmts_does_not_know_is_registered_from_qemu_user_binfmts_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """qemu-user-binfmt leaves its entries to systemd-binfmt, which a host without systemd never
    runs, and update-binfmts does not know them: the entry is registered from its binfmt.d file,
    with the lab's flags."""
    binfmt, binfmt_d = tmp_path / "binfmt_misc", tmp_path / "binfmt.d"
    binfmt.mkdir()
    binfmt_d.mkdir()
    (binfmt / "status").write_text("enabled")
    for name in ("aarch64", "arm"):
        (binfmt_d / f"qemu-{name}.conf").write_text(CONF.format(name=name))
    monkeypatch.setattr(lab_emulation, "_BINFMT", binfmt)
    monkeypatch.setattr(lab_emulation, "_BINFMT_D", binfmt_d)
    monkeypatch.setattr(lab_emulation, "_qemu_major", lambda qemu: lab_emulation.QEMU_MIN_MAJOR)
    ran: list[list[str]] = []
    monkeypatch.setattr(lab_emulation, "run", lambda argv, **_: ran.append(argv))
    registered: list[str] = []
    monkeypatch.setattr(lab_emulation, "_register_line", registered.append)
    lab_emulation.enable_emulation("arm64", "http://deb.debian.org/debian")
    assert ["update-binfmts", "--enable", "qemu-aarch64"] in ran
    assert registered == [
        CONF.format(name=name).strip().replace(":OPF", ":POCF") for name in ("aarch64", "arm")
    ]


def test_an_entry_that_neither_knows_stops_the_lab_with_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lab_emulation, "_BINFMT_D", tmp_path)
    with pytest.raises(SystemExit, match="qemu-aarch64: update-binfmts did not register it"):
        lab_emulation._conf_line("aarch64")
