"""qemu-user for the lab's emulated nodes (arm64, armhf): installed and registered with binfmt_misc.

Kept apart from devtools/pikit_dev/lab_image.py, whose source is part of every image's recipe: how the
host runs an emulated node is not part of the image.
"""

from __future__ import annotations

import platform
from pathlib import Path

from pikit.phases import run

# systemd 255 and later (Trixie has 257) starts every unit through systemd-executor, which it
# runs from an open file descriptor. Under binfmt_misc that needs the O (open-binary) flag, and
# even then Debian 12's qemu-user 7.2 fails every unit with Result=resources (sshd never
# starts). qemu-user 10.0 (Debian 13's, and bookworm-backports') with flags POCF starts them.
# Tried on 2026-11-28: 7.2 with PF or POCF and 10.0 with PF fail, 10.0 with POCF boots.
QEMU_MIN_MAJOR = 10
BINFMT_FLAGS = "POCF"
_BINFMT = Path("/proc/sys/fs/binfmt_misc")
# Where qemu-user-binfmt (Debian 13's, and bookworm-backports') leaves its entries for systemd-binfmt.
_BINFMT_D = Path("/usr/lib/binfmt.d")


_QEMU = {"arm64": "aarch64", "armhf": "arm"}


def enable_emulation(arch: str, mirror: str) -> None:
    """qemu-user for `arch`, new enough for systemd 257, registered so that it can run it."""
    installed = False
    if _qemu_major(_QEMU[arch]) < QEMU_MIN_MAJOR:
        _install_qemu(mirror)
        installed = True
        if _qemu_major(_QEMU[arch]) < QEMU_MIN_MAJOR:
            raise SystemExit(
                f"qemu-{_QEMU[arch]}-static is older than {QEMU_MIN_MAJOR}.0 after installing it"
            )
    if not (_BINFMT / "status").exists():
        run(["mount", "-t", "binfmt_misc", "binfmt_misc", _BINFMT])
    for qemu in _QEMU.values():
        entry = _BINFMT / f"qemu-{qemu}"
        if not entry.exists():
            run(["update-binfmts", "--enable", f"qemu-{qemu}"], check=False)
        if not entry.exists():
            # qemu-user-binfmt's entries are not in update-binfmts' database: systemd-binfmt
            # registers them at boot, which a host without systemd as PID 1 never does.
            _register_line(_with_flags(_conf_line(qemu)))
            continue
        # With F the kernel keeps the interpreter it opened at registration: after an install,
        # every architecture's entry still runs the old qemu until it is registered again.
        if installed or not set(BINFMT_FLAGS) <= set(_binfmt_field(entry, "flags:")):
            _register(entry)


def _qemu_major(qemu: str) -> int:
    binary = Path(f"/usr/bin/qemu-{qemu}-static")
    if not binary.exists():
        return 0
    said = run([binary, "--version"], capture=True).stdout.decode().split()
    return int(said[2].split(".")[0]) if len(said) > 2 and said[2][:1].isdigit() else 0


def _install_qemu(mirror: str) -> None:
    if platform.freedesktop_os_release().get("VERSION_CODENAME") == "bookworm":
        sources = Path("/etc/apt/sources.list.d/pikit-bookworm-backports.list")
        sources.write_text(f"deb {mirror} bookworm-backports main\n")
        run(["apt-get", "update", "-qq"])
        run(
            [
                "apt-get",
                "install",
                "-y",
                "-qq",
                "-t",
                "bookworm-backports",
                "qemu-user-static",
                "binfmt-support",
            ]
        )
    else:
        run(["apt-get", "install", "-y", "-qq", "qemu-user-static", "binfmt-support"])


def _binfmt_field(entry: Path, name: str) -> str:
    for line in entry.read_text().splitlines():
        if line.startswith(name):
            return line.split(None, 1)[1] if " " in line else ""
    return ""


def _register(entry: Path) -> None:
    def escaped(hexed: str) -> str:
        return "".join(f"\\x{hexed[i : i + 2]}" for i in range(0, len(hexed), 2))

    interpreter = _binfmt_field(entry, "interpreter")
    magic, mask = _binfmt_field(entry, "magic"), _binfmt_field(entry, "mask")
    offset = _binfmt_field(entry, "offset") or "0"
    entry.write_text("-1")
    _register_line(f":{entry.name}:M:{offset}:{escaped(magic)}:{escaped(mask)}:{interpreter}:{BINFMT_FLAGS}")


def _conf_line(qemu: str) -> str:
    """qemu-user-binfmt's registration line of qemu-`qemu`, as binfmt.d writes it:
    :name:type:offset:magic:mask:interpreter:flags."""
    conf = _BINFMT_D / f"qemu-{qemu}.conf"
    if not conf.exists():
        raise SystemExit(
            f"qemu-{qemu}: update-binfmts did not register it, and there is no {conf} to register"
        )
    return next(line for line in conf.read_text().splitlines() if line.startswith(":"))


def _with_flags(line: str) -> str:
    """A registration line with the lab's flags in place of its own."""
    return f"{line.rsplit(':', 1)[0]}:{BINFMT_FLAGS}"


def _register_line(line: str) -> None:
    (_BINFMT / "register").write_text(line)
