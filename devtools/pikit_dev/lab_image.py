"""Build the lab's "Pi" base image without a registry: debootstrap + podman import.

This file *is* the image recipe: its content hash (plus the lab SSH key, suite
and architecture) labels the image, so the image is rebuilt exactly when this
recipe changes and reused otherwise.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import subprocess
from pathlib import Path

from pikit.phases import exclusive, phase, run, say
from pikit_dev.lab_emulation import enable_emulation

# What Raspberry Pi Imager installs today (Raspberry Pi OS on Debian 13); Bookworm (12) stays
# proven in `make test-ops`. A lab's inventory picks one with `lab_suite`.
DEFAULT_SUITE = "trixie"
SUITES = ("bookworm", "trixie")

PACKAGES = [
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-apt",
    "sudo",
    "iproute2",
    "procps",
    "openssh-server",
    "ca-certificates",
]

# Under qemu-user (10.0) systemd 257 cannot set up a unit's mount namespace: every unit that asks
# for one (ProtectSystem=, PrivateTmp=, ReadWritePaths=, ...) fails with 226/NAMESPACE, Debian's
# own chrony among them (Bookworm's systemd 252 and chrony 4.3 did not meet this). Nor can it
# pass a unit credentials: those that load or import any (journald, sysusers, tmpfiles) fail
# with 243/CREDENTIALS. An emulated node's services run without those settings; the kit's units
# are unchanged, and every native node, the lab's included, applies them. A drop-in of the
# service.d directory applies to every service and overrides its unit file.
_EMULATED_SERVICE_DROPIN = """\
# The lab's emulated node (pikit_dev.lab_image): qemu-user cannot set up mount namespaces or credentials.
[Service]
ProtectSystem=no
ProtectHome=no
PrivateTmp=no
PrivateDevices=no
PrivateMounts=no
ProtectProc=default
ProcSubset=all
ProtectKernelTunables=no
ProtectKernelModules=no
ProtectKernelLogs=no
ProtectControlGroups=no
ProtectHostname=no
ProtectClock=no
PrivateNetwork=no
ReadWritePaths=
ReadOnlyPaths=
InaccessiblePaths=
TemporaryFileSystem=
BindPaths=
BindReadOnlyPaths=
LoadCredential=
ImportCredential=
"""

# The user Raspberry Pi Imager's first boot makes: an unprivileged login with passwordless sudo
# (Pi OS writes this very sudoers file). The lab's nodes are reached as this user with become, as
# real Pis are (inventory/lab and inventory/example: ansible_user, ansible_become); root has no key.
LAB_USER = "pi"
LAB_UID = 1000
_SUDOERS = f"{LAB_USER} ALL=(ALL) NOPASSWD: ALL\n"

_SSH_HOSTKEY_DROPIN = """\
# Each container makes its own host keys on first boot (the image ships none).
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
"""


def lab_home() -> Path:
    default = Path.home() / ".local/share/pikit/lab"
    return Path(os.environ.get("PIKIT_LAB_HOME", default))


def ssh_key() -> Path:
    """The lab's SSH identity, created once per machine and baked into the image."""
    key = lab_home() / "ssh/id_ed25519"
    public = Path(f"{key}.pub")  # ssh-keygen writes it last
    if not public.exists():
        with exclusive(lab_home() / "ssh.lock", "making the lab's SSH key"):
            if not public.exists():
                key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                key.unlink(missing_ok=True)  # half made: ssh-keygen would ask to overwrite it
                run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "pikit-lab", "-f", key])
    return key


def host_arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "armhf"}.get(
        platform.machine(), platform.machine()
    )


def image_name(suite: str, arch: str) -> str:
    return f"localhost/pikit-node:{suite}-{arch}"


def recipe_hash(suite: str, arch: str) -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(Path(f"{ssh_key()}.pub").read_bytes())
    digest.update(f"{suite}/{arch}".encode())
    return digest.hexdigest()[:16]


def _current_label(image: str) -> str | None:
    proc = subprocess.run(
        ["podman", "image", "inspect", "--format", '{{ index .Labels "pikit.recipe" }}', image],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def debian_mirror() -> str:
    if "PIKIT_DEBIAN_MIRROR" in os.environ:
        return os.environ["PIKIT_DEBIAN_MIRROR"]
    for sources in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def _prepare_rootfs(rootfs: Path, emulated: bool) -> None:
    for hostkey in (rootfs / "etc/ssh").glob("ssh_host_*"):
        hostkey.unlink()
    dropin = rootfs / "etc/systemd/system/ssh.service.d/hostkeys.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(_SSH_HOSTKEY_DROPIN)

    _add_login_user(rootfs)

    # minbase has no netbase; a real Pi OS has these lines (podman runs with --no-hosts).
    (rootfs / "etc/hosts").write_text("127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n")

    # An empty machine-id makes systemd generate a fresh one per container.
    (rootfs / "etc/machine-id").write_text("")
    dbus_id = rootfs / "var/lib/dbus/machine-id"
    dbus_id.parent.mkdir(parents=True, exist_ok=True)
    dbus_id.unlink(missing_ok=True)
    dbus_id.symlink_to("/etc/machine-id")

    if emulated:
        every_service = rootfs / "etc/systemd/system/service.d/99-pikit-emulated.conf"
        every_service.parent.mkdir(parents=True, exist_ok=True)
        every_service.write_text(_EMULATED_SERVICE_DROPIN)

    run(["chroot", rootfs, "apt-get", "clean"])
    shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True)
    # An old lists dir tells Ansible's apt cache_valid_time that the cache is stale.
    os.utime(rootfs / "var/lib/apt/lists", (0, 0))


def _add_login_user(rootfs: Path) -> None:
    """The Imager user: in group sudo, passwordless sudo, the lab's key; no password at all."""
    run(
        [
            "chroot",
            rootfs,
            "useradd",
            "--create-home",
            "--uid",
            str(LAB_UID),
            "--user-group",
            "--groups",
            "sudo",
            "--shell",
            "/bin/bash",
            LAB_USER,
        ]
    )
    sudoers = rootfs / f"etc/sudoers.d/010_{LAB_USER}-nopasswd"
    sudoers.write_text(_SUDOERS)
    sudoers.chmod(0o440)
    ssh_dir = rootfs / "home" / LAB_USER / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    authorized = ssh_dir / "authorized_keys"
    authorized.write_text(Path(f"{ssh_key()}.pub").read_text())
    authorized.chmod(0o600)
    for path in (ssh_dir, authorized):
        os.chown(path, LAB_UID, LAB_UID)


def ensure_image(suite: str = DEFAULT_SUITE, arch: str | None = None) -> str:
    """Return the image name, building it only when the recipe changed. An emulated
    architecture's qemu-user is set up first: building and booting the image both need it."""
    arch = arch or host_arch()
    image = image_name(suite, arch)
    wanted = recipe_hash(suite, arch)
    if arch != host_arch():
        enable_emulation(arch, debian_mirror())
    with exclusive(lab_home() / "build" / f"image-{suite}-{arch}.lock", f"building {image}"):
        if _current_label(image) == wanted:
            say(f"image {image} is current (recipe {wanted})")
            return image
        _build(image, wanted, suite, arch)
    return image


def _build(image: str, wanted: str, suite: str, arch: str) -> None:
    """debootstrap `suite` for `arch` and import it into podman as `image`, labelled `wanted`."""
    build = lab_home() / "build"
    rootfs = build / f"rootfs-{suite}-{arch}"
    log = build / f"image-{suite}-{arch}.log"
    log.unlink(missing_ok=True)
    emulated = arch != host_arch()
    with phase(f"build lab image {image} (log: {log})"):
        if rootfs.exists():
            shutil.rmtree(rootfs)
        rootfs.mkdir(parents=True)
        with phase("debootstrap"):
            run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--arch={arch}",
                    f"--include={','.join(PACKAGES)}",
                    suite,
                    rootfs,
                    debian_mirror(),
                ],
                log=log,
            )
        _prepare_rootfs(rootfs, emulated)
        with phase("podman import"):
            importer = shlex.join(
                [
                    "podman",
                    "import",
                    f"--arch={arch}",
                    "--change",
                    'CMD ["/sbin/init"]',
                    "--change",
                    f"LABEL pikit.recipe={wanted}",
                    "-",
                    image,
                ]
            )
            run(["sh", "-c", f"tar -C {shlex.quote(str(rootfs))} -c . | {importer}"], log=log)
        shutil.rmtree(rootfs)
