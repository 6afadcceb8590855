"""`edge-agent flash`: prepare a Raspberry Pi OS boot partition so a device comes up running the agent.

No GUI, no network, no root: the FAT partition of a raw `.img` is edited with mtools
(never mounted), or a boot partition that is already mounted is written as a directory.
Two first-boot formats, as Raspberry Pi Imager writes them:
- `firstrun` (Bookworm): `firstrun.sh` + `systemd.run=` on the kernel command line;
- `cloud-init` (Trixie): NoCloud `user-data`, `meta-data`, `network-config`, `ds=nocloud`.
Either way the agent's wheels, config and certificates travel in `pikit/` on the
partition, and one script (`pikit/install.sh`) installs them offline on first boot, moves
the private key into place (0600, the agent's user) and deletes every copy from the
partition: FAT has no permissions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import struct
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from edge_agent import unitfile
from edge_agent.sensors import device_nodes

MARKER = "pikit edge-agent flash"
PAYLOAD = "pikit"
FAT_TYPES = {0x01, 0x04, 0x06, 0x0B, 0x0C, 0x0E}
SECTOR = 512
# Left free on the partition beyond the payload (directory entries, cluster rounding).
SPACE_MARGIN = 256 * 1024


class FlashError(Exception):
    """A refusal: the message says what is wrong and what to do."""


class BootPartition(Protocol):
    def read(self, name: str) -> bytes | None: ...
    def write(self, name: str, data: bytes) -> None: ...
    def free_bytes(self) -> int: ...


@dataclass
class BootDir:
    """A boot partition mounted by the system (or any directory laid out like one)."""

    root: Path

    def read(self, name: str) -> bytes | None:
        path = self.root / name
        return path.read_bytes() if path.is_file() else None

    def write(self, name: str, data: bytes) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def free_bytes(self) -> int:
        stat = os.statvfs(self.root)
        return stat.f_bavail * stat.f_frsize


@dataclass
class ImagePartition:
    """The FAT partition inside a raw disk image, edited in place with mtools."""

    image: Path
    offset: int

    def _mtools(self, *argv: str) -> subprocess.CompletedProcess[bytes]:
        env = {**os.environ, "MTOOLS_SKIP_CHECK": "1", "MTOOLS_NO_VFAT": "0"}
        try:
            return subprocess.run(argv, capture_output=True, env=env, check=False)
        except FileNotFoundError:
            raise FlashError("mtools is not installed (Debian: apt install mtools)") from None

    @property
    def _spec(self) -> str:
        return f"{self.image}@@{self.offset}"

    def read(self, name: str) -> bytes | None:
        with tempfile.TemporaryDirectory() as work:
            target = Path(work) / "file"
            proc = self._mtools("mcopy", "-n", "-i", self._spec, f"::/{name}", str(target))
            return target.read_bytes() if proc.returncode == 0 and target.exists() else None

    def write(self, name: str, data: bytes) -> None:
        parts = name.split("/")
        for depth in range(1, len(parts)):
            self._mtools("mmd", "-D", "s", "-i", self._spec, "::/" + "/".join(parts[:depth]))
        with tempfile.TemporaryDirectory() as work:
            source = Path(work) / "file"
            source.write_bytes(data)
            proc = self._mtools("mcopy", "-o", "-i", self._spec, str(source), f"::/{name}")
        if proc.returncode != 0:
            raise FlashError(f"{self.image}: writing {name} failed: {proc.stderr.decode().strip()}")

    def free_bytes(self) -> int:
        proc = self._mtools("mdir", "-i", self._spec, "::/")
        match = re.search(r"([\d ]+) bytes free", proc.stdout.decode())
        if proc.returncode != 0 or not match:
            raise FlashError(f"{self.image}: cannot read the FAT partition ({proc.stderr.decode().strip()})")
        return int(match.group(1).replace(" ", ""))


def fat_partition_offset(image: Path) -> int:
    """Byte offset of the first FAT partition in the image's MBR partition table."""
    with image.open("rb") as handle:
        mbr = handle.read(SECTOR)
    if len(mbr) < SECTOR or mbr[510:512] != b"\x55\xaa":
        raise FlashError(f"{image}: no partition table; not a Raspberry Pi OS image")
    for index in range(4):
        entry = mbr[446 + 16 * index : 446 + 16 * (index + 1)]
        kind, start = entry[4], int(struct.unpack("<I", entry[8:12])[0])
        if kind == 0xEE:
            raise FlashError(f"{image}: a GPT disk; Raspberry Pi OS images use an MBR partition table")
        if kind in FAT_TYPES and start:
            return start * SECTOR
    raise FlashError(f"{image}: no FAT boot partition; not a Raspberry Pi OS image")


@dataclass(frozen=True)
class Device:
    hostname: str
    user: str
    ssh_key: str
    wifi_ssid: str | None = None
    wifi_password: str | None = None
    wifi_country: str = "GB"

    @property
    def wifi_psk(self) -> str:
        """The WPA2 key itself (64 hex digits), so that the card never holds the passphrase.

        802.11i: PBKDF2-HMAC-SHA1(passphrase, SSID, 4096 rounds, 32 bytes). NetworkManager's
        `psk=` and netplan's `password` take it in place of a passphrase. (A WPA3-only
        network needs the passphrase itself; WPA2 and WPA2/WPA3 transition networks take this.)
        """
        assert self.wifi_ssid is not None and self.wifi_password is not None
        key = hashlib.pbkdf2_hmac("sha1", self.wifi_password.encode(), self.wifi_ssid.encode(), 4096, 32)
        return key.hex()

    def validate(self) -> None:
        if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", self.hostname):
            raise FlashError(f"--hostname {self.hostname!r}: use lowercase letters, digits and hyphens")
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", self.user):
            raise FlashError(f"--user {self.user!r}: not a valid Linux user name")
        if not re.match(r"^(ssh-|ecdsa-|sk-)\S+ \S+", self.ssh_key) or "\n" in self.ssh_key.strip():
            raise FlashError("--ssh-key: expected one OpenSSH public key (ssh-ed25519 AAAA...)")
        if self.wifi_ssid is not None:
            if not self.wifi_password or not 8 <= len(self.wifi_password) <= 63:
                raise FlashError("--wifi-password: WPA needs 8 to 63 characters")
            if any(c in self.wifi_ssid + self.wifi_password for c in "\n\r'"):
                raise FlashError("--wifi-ssid/--wifi-password: newlines and single quotes are not supported")
            if not re.fullmatch(r"[A-Z]{2}", self.wifi_country):
                raise FlashError(f"--wifi-country {self.wifi_country!r}: a two-letter ISO code, e.g. DE")


@dataclass(frozen=True)
class Payload:
    """What the agent needs on the device: wheels, config, the CA, its certificate and key."""

    wheels: list[Path]
    config: Path
    ca: Path
    cert: Path
    key: Path

    def files(self) -> dict[str, bytes]:
        out = {f"{PAYLOAD}/wheels/{w.name}": w.read_bytes() for w in self.wheels}
        out[f"{PAYLOAD}/config.toml"] = self.config.read_bytes()
        out[f"{PAYLOAD}/tls/ca.crt"] = self.ca.read_bytes()
        out[f"{PAYLOAD}/tls/device.crt"] = self.cert.read_bytes()
        out[f"{PAYLOAD}/tls/device.key"] = self.key.read_bytes()
        name = unit_name()
        out[f"{PAYLOAD}/{name}.service"] = unit(*agent_settings(self.config)).encode()
        out[f"{PAYLOAD}/install.sh"] = install_sh(layout(), name).encode()
        return out


def agent_settings(config: Path) -> tuple[str, str, list[str]]:
    """The spool directory, the device id and the sensors' device nodes of an agent
    configuration: its unit needs them."""
    try:
        doc = tomllib.loads(config.read_text())
        settings = str(doc["spool"]["directory"]), str(doc["device_id"])
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError) as exc:
        raise FlashError(f"--config {config}: spool.directory or device_id is not readable ({exc})") from None
    sensors = doc.get("sensors", [])
    if not isinstance(sensors, list):
        raise FlashError(f"--config {config}: sensors must be an array of tables ([[sensors]])")
    for i, table in enumerate(sensors):
        if not isinstance(table, dict):
            raise FlashError(f"--config {config}: sensors[{i}] must be a table ([[sensors]]), not {table!r}")
    return *settings, device_nodes(sensors)


def unit(spool_dir: str, device_id: str, devices: list[str]) -> str:
    """The agent's unit: what the edge_agent role installs (edge_agent/unitfile.py)."""
    facts = {
        "edge_agent_spool_dir": spool_dir,
        "edge_agent_device_id": device_id,
        "edge_agent_devices": devices,
    }
    try:
        return unitfile.render(MARKER, facts)
    except unitfile.UnitSourceError as exc:
        raise FlashError(str(exc)) from None


def layout() -> dict[str, Any]:
    """Where the edge_agent role puts the agent on a device (edge_agent/unitfile.py)."""
    try:
        return unitfile.layout()
    except unitfile.UnitSourceError as exc:
        raise FlashError(str(exc)) from None


def unit_name() -> str:
    """The agent's unit as the role names it (its `_edge_agent_unit`)."""
    try:
        return str(unitfile.role_values()[f"{unitfile.UNIT_ROLE}_name"])
    except unitfile.UnitSourceError as exc:
        raise FlashError(str(exc)) from None


def install_sh(layout: dict[str, Any], unit_name: str) -> str:
    """The first-boot script: the agent installed offline where the edge_agent role puts it
    (`layout`: its `_edge_agent_layout`) and run by its unit, then every copy of the device's
    secrets removed from the boot partition (FAT has no permissions)."""
    where = {
        key: value if key == "hardware_groups" else shlex.quote(str(value)) for key, value in layout.items()
    }
    user, tls, cert = where["user"], where["tls_dir"], where["cert_name"]
    releases, install_dir = where["releases"], where["install_dir"]
    groups = " ".join(shlex.quote(group) for group in layout["hardware_groups"])
    release_link = shlex.quote(os.path.relpath(layout["releases"], layout["install_dir"]))
    unit = shlex.quote(unit_name)
    return f"""#!/bin/bash
# {MARKER}: install the edge agent offline on first boot, then remove every copy of
# the device's secrets from the boot partition (FAT has no permissions).
set -eu
PAYLOAD=$(dirname "$(readlink -f "$0")")
exec > >(tee -a /var/log/pikit-install.log) 2>&1
id {user} >/dev/null 2>&1 || useradd --system --user-group --home-dir {where["home"]} \\
  --shell /usr/sbin/nologin {user}
for group in {groups}; do
  if getent group "$group" >/dev/null; then usermod -aG "$group" {user}; fi
done
install -d -m 0755 {install_dir} {where["conf_dir"]}
install -d -m 0750 -o root -g {user} {tls}
install -m 0644 "$PAYLOAD/tls/ca.crt" {tls}/ca.crt
install -m 0644 "$PAYLOAD/tls/device.crt" {tls}/{cert}.crt
(umask 077; cat "$PAYLOAD/tls/device.key" "$PAYLOAD/tls/device.crt" > {tls}/{cert}.pem)
chown {user}:{user} {tls}/{cert}.pem
chmod 0600 {tls}/{cert}.pem
install -m 0640 -g {user} "$PAYLOAD/config.toml" {where["config"]}
READ_SPOOL='import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["spool"]["directory"])'
SPOOL=$(python3 -c "$READ_SPOOL" \\
  {where["config"]})
install -d -m 0750 -o {user} -g {user} "$SPOOL"
# The edge_agent role's layout (roles/edge_agent/tasks/install.yml): one directory per release,
# `current` pointing at the one the unit runs, so that playbooks/edge-upgrade.yml can take over.
WHEEL=$(basename "$PAYLOAD"/wheels/pikit_edge_agent-*-py3-none-any.whl)
RELEASE=${{WHEEL#pikit_edge_agent-}}; RELEASE=${{RELEASE%-py3-none-any.whl}}
install -d -m 0755 {releases}/"$RELEASE"
cp -r "$PAYLOAD/wheels" {releases}/"$RELEASE"/wheels
python3 -m venv --system-site-packages {releases}/"$RELEASE"/venv
{releases}/"$RELEASE"/venv/bin/pip install --no-index \\
  --find-links {releases}/"$RELEASE"/wheels pikit-edge-agent=="$RELEASE"
ln -sfn {release_link}/"$RELEASE" {where["current"]}
install -m 0644 "$PAYLOAD/{unit_name}.service" /etc/systemd/system/{unit}.service
systemctl daemon-reload
systemctl enable {unit}
# firstrun reboots right after this script; cloud-init runs it on a booted system (--start).
if [ "${{1:-}}" = --start ]; then systemctl start {unit}; fi
shred -u "$PAYLOAD/tls/device.key" 2>/dev/null || rm -f "$PAYLOAD/tls/device.key"
rm -rf "$PAYLOAD"
echo "pikit: edge agent installed"
"""


def firstrun_sh(device: Device) -> str:
    q = shlex.quote
    wifi = ""
    if device.wifi_ssid:
        wifi = f"""
install -d -m 0700 /etc/NetworkManager/system-connections
cat > /etc/NetworkManager/system-connections/pikit-wifi.nmconnection <<'WIFI'
[connection]
id=pikit-wifi
type=wifi
[wifi]
mode=infrastructure
ssid={device.wifi_ssid}
[wifi-security]
key-mgmt=wpa-psk
psk={device.wifi_psk}
[ipv4]
method=auto
[ipv6]
method=auto
WIFI
chmod 0600 /etc/NetworkManager/system-connections/pikit-wifi.nmconnection
rfkill unblock wifi 2>/dev/null
raspi-config nonint do_wifi_country {q(device.wifi_country)} 2>/dev/null
"""
    return f"""#!/bin/bash
# {MARKER} (Bookworm firstrun format)
set +e
BOOT=/boot/firmware
[ -f "$BOOT/cmdline.txt" ] || BOOT=/boot
NAME={q(device.hostname)}
CURRENT=$(tr -d " \\t\\n\\r" < /etc/hostname)
echo "$NAME" > /etc/hostname
sed -i "s/127.0.1.1.*$CURRENT/127.0.1.1\\t$NAME/g" /etc/hosts
USER_NAME={q(device.user)}
if [ -x /usr/lib/userconf-pi/userconf ]; then
  /usr/lib/userconf-pi/userconf "$USER_NAME" '*'
elif ! id "$USER_NAME" >/dev/null 2>&1; then
  useradd -m -s /bin/bash -G sudo "$USER_NAME"
fi
HOME_DIR=$(getent passwd "$USER_NAME" | cut -d: -f6)
install -d -m 0700 -o "$USER_NAME" -g "$USER_NAME" "$HOME_DIR/.ssh"
echo {q(device.ssh_key.strip())} > "$HOME_DIR/.ssh/authorized_keys"
chown "$USER_NAME:$USER_NAME" "$HOME_DIR/.ssh/authorized_keys"
chmod 0600 "$HOME_DIR/.ssh/authorized_keys"
echo "$USER_NAME ALL=(ALL) NOPASSWD: ALL" > "/etc/sudoers.d/010_pikit-$USER_NAME"
chmod 0440 "/etc/sudoers.d/010_pikit-$USER_NAME"
systemctl enable ssh
{wifi}
bash "$BOOT/{PAYLOAD}/install.sh"
rm -f "$BOOT/firstrun.sh"
sed -i 's| systemd.run.*||g' "$BOOT/cmdline.txt"
exit 0
"""


def cloud_init_files(device: Device) -> dict[str, bytes]:
    """NoCloud seed files. JSON is YAML, and needs nothing beyond the standard library."""
    user_data = {
        "hostname": device.hostname,
        "manage_etc_hosts": True,
        "users": [
            {
                "name": device.user,
                "groups": "sudo",
                "shell": "/bin/bash",
                "sudo": "ALL=(ALL) NOPASSWD:ALL",
                "lock_passwd": True,
                "ssh_authorized_keys": [device.ssh_key.strip()],
            }
        ],
        "ssh_pwauth": False,
        "runcmd": [
            ["systemctl", "enable", "--now", "ssh"],
            ["bash", f"/boot/firmware/{PAYLOAD}/install.sh", "--start"],
        ],
    }
    identity = hashlib.sha256(json.dumps(user_data, sort_keys=True).encode()).hexdigest()[:12]
    files = {
        "user-data": f"#cloud-config\n# {MARKER}\n{json.dumps(user_data, indent=2)}\n".encode(),
        "meta-data": f"# {MARKER}\ninstance-id: pikit-{device.hostname}-{identity}\n".encode(),
    }
    if device.wifi_ssid:
        network = {
            "network": {
                "version": 2,
                "wifis": {
                    "wlan0": {
                        "dhcp4": True,
                        "optional": True,
                        "regulatory-domain": device.wifi_country,
                        "access-points": {device.wifi_ssid: {"password": device.wifi_psk}},
                    }
                },
            }
        }
        files["network-config"] = f"# {MARKER}\n{json.dumps(network, indent=2)}\n".encode()
    return files


def detect_format(boot: BootPartition) -> str:
    return (
        "cloud-init"
        if boot.read("user-data") is not None or boot.read("meta-data") is not None
        else "firstrun"
    )


def existing_customisation(boot: BootPartition, fmt: str, cmdline: str) -> str | None:
    """What an earlier customisation left on the partition, or None."""
    if boot.read(f"{PAYLOAD}/install.sh") is not None:
        return f"{PAYLOAD}/ (an earlier edge-agent flash)"
    if fmt == "firstrun":
        if boot.read("firstrun.sh") is not None:
            return "firstrun.sh"
        if "systemd.run=" in cmdline:
            return "systemd.run= in cmdline.txt"
        return None
    user_data = (boot.read("user-data") or b"").decode(errors="replace")
    meaningful = [
        line for line in user_data.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    return "user-data with settings" if meaningful else None


def flash(
    boot: BootPartition, device: Device, payload: Payload, fmt: str = "auto", force: bool = False
) -> tuple[str, list[str]]:
    """Write the customisation; returns the format used and the files written."""
    device.validate()
    cmdline_raw, config_txt = boot.read("cmdline.txt"), boot.read("config.txt")
    if cmdline_raw is None or config_txt is None:
        raise FlashError("not a Raspberry Pi OS boot partition: cmdline.txt or config.txt is missing")
    cmdline = cmdline_raw.decode().strip().splitlines()[0] if cmdline_raw.strip() else ""
    if "root=" not in cmdline:
        raise FlashError("cmdline.txt names no root= filesystem: not a Raspberry Pi OS boot partition")
    fmt = detect_format(boot) if fmt == "auto" else fmt
    found = existing_customisation(boot, fmt, cmdline)
    if found and not force:
        raise FlashError(f"the partition is already customised ({found}); --force overwrites it")

    files = payload.files()
    if fmt == "firstrun":
        files["firstrun.sh"] = firstrun_sh(device).encode()
        hook = (
            "systemd.run=/boot/firstrun.sh systemd.run_success_action=reboot"
            " systemd.unit=kernel-command-line.target"
        )
        base = re.sub(r" systemd\.run.*", "", cmdline)
        files["cmdline.txt"] = f"{base} {hook}\n".encode()
    else:
        files.update(cloud_init_files(device))
        if "ds=nocloud" not in cmdline:
            files["cmdline.txt"] = f"{cmdline} ds=nocloud\n".encode()

    needed = sum(len(data) for data in files.values()) + SPACE_MARGIN
    free = boot.free_bytes()
    if needed > free:
        raise FlashError(
            f"no space: the agent needs {needed // 1024} KiB, the boot partition has {free // 1024} KiB free"
        )
    # cmdline.txt last: a partition interrupted before it is not half-armed.
    for name in sorted(files, key=lambda n: n == "cmdline.txt"):
        boot.write(name, files[name])
    return fmt, sorted(files)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--image", type=Path, help="a raw Raspberry Pi OS .img (edited in place, never mounted)"
    )
    target.add_argument("--boot-dir", type=Path, help="a mounted boot partition")
    parser.add_argument("--format", choices=["auto", "firstrun", "cloud-init"], default="auto")
    parser.add_argument("--force", action="store_true", help="overwrite an earlier customisation")
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--user", default="pi", help="the login user (SSH key only, passwordless sudo)")
    parser.add_argument("--ssh-key", type=Path, required=True, help="an OpenSSH public key file")
    parser.add_argument("--wifi-ssid")
    parser.add_argument("--wifi-password")
    parser.add_argument("--wifi-country", default="GB")
    parser.add_argument("--wheels", type=Path, required=True, help="directory with the agent's wheels")
    parser.add_argument("--config", type=Path, required=True, help="the device's config.toml")
    parser.add_argument("--ca", type=Path, required=True, help="the cluster CA certificate (PEM)")
    parser.add_argument("--cert", type=Path, required=True, help="the device's client certificate (PEM)")
    parser.add_argument("--key", type=Path, required=True, help="the device's private key (PEM)")


def run(args: argparse.Namespace) -> int:
    boot: BootPartition
    if args.image:
        if not args.image.is_file():
            raise FlashError(f"--image {args.image}: no such file")
        boot = ImagePartition(args.image, fat_partition_offset(args.image))
    else:
        boot = BootDir(args.boot_dir)
    wheels = sorted(args.wheels.glob("*.whl"))
    releases = [w.name for w in wheels if w.name.startswith("pikit_edge_agent-")]
    if not releases:
        raise FlashError(f"--wheels {args.wheels}: no pikit_edge_agent wheel (run `make artifacts`)")
    if len(releases) > 1:
        raise FlashError(
            f"--wheels {args.wheels}: several agent releases ({', '.join(releases)}); keep the one to flash"
        )
    for name in ("config", "ca", "cert", "key", "ssh_key"):
        if not getattr(args, name).is_file():
            raise FlashError(f"--{name.replace('_', '-')} {getattr(args, name)}: no such file")
    device = Device(
        args.hostname,
        args.user,
        args.ssh_key.read_text(),
        args.wifi_ssid,
        args.wifi_password,
        args.wifi_country,
    )
    payload = Payload(wheels, args.config, args.ca, args.cert, args.key)
    fmt, written = flash(boot, device, payload, args.format, args.force)
    print(f"edge-agent flash: {args.image or args.boot_dir}: {fmt} format, {len(written)} files written")
    return 0
