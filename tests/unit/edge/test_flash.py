"""`edge-agent flash` on small Pi-like images built here (sfdisk, mkfs.vfat, mtools), read back."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from edge_agent.cli import main
from edge_agent.flash import (
    MARKER,
    Device,
    FlashError,
    agent_settings,
    cloud_init_files,
    install_sh,
    layout,
    unit,
    unit_name,
)

from edge_agent import unitfile
from pikit import REPO

CMDLINE = (
    "console=serial0,115200 console=tty1 root=PARTUUID=1234abcd-02 rootfstype=ext4 fsck.repair=yes rootwait\n"
)
TRIXIE_USER_DATA = (
    "#cloud-config\n# This is the default user-data; see the documentation.\n#hostname: raspberrypi\n"
)
MTOOLS = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}


def _mcopy(image: Path, offset: int, name: str, data: bytes, tmp: Path) -> None:
    source = tmp / "src"
    source.write_bytes(data)
    subprocess.run(
        ["mcopy", "-o", "-i", f"{image}@@{offset}", str(source), f"::/{name}"], env=MTOOLS, check=True
    )


def build_image(tmp: Path, files: dict[str, bytes], fat_mb: int = 16) -> Path:
    """A disk image with an MBR, a FAT32 boot partition at 4 MiB holding `files`, and a root partition."""
    image = tmp / "pi.img"
    subprocess.run(["truncate", "-s", f"{fat_mb + 8}M", str(image)], check=True)
    layout = f"label: dos\nstart=8192, size={fat_mb * 2048}, type=c\ntype=83\n"
    subprocess.run(["sfdisk", "-q", str(image)], input=layout.encode(), check=True)
    subprocess.run(
        ["mkfs.vfat", "-n", "bootfs", "--offset", "8192", str(image), str(fat_mb * 1024)],
        check=True,
        capture_output=True,
    )
    for name, data in files.items():
        _mcopy(image, 8192 * 512, name, data, tmp)
    return image


def read_back(image: Path, name: str, tmp: Path) -> bytes:
    target = tmp / "out"
    target.unlink(missing_ok=True)
    subprocess.run(
        ["mcopy", "-n", "-i", f"{image}@@{8192 * 512}", f"::/{name}", str(target)], env=MTOOLS, check=True
    )
    return target.read_bytes()


def listing(image: Path) -> str:
    proc = subprocess.run(
        ["mdir", "-/", "-b", "-i", f"{image}@@{8192 * 512}", "::/"], env=MTOOLS, capture_output=True
    )
    return proc.stdout.decode()


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    d = tmp_path / "inputs"
    (d / "wheels").mkdir(parents=True)
    (d / "wheels/pikit_edge_agent-0.1.0-py3-none-any.whl").write_bytes(b"wheel" * 100)
    (d / "wheels/kafka_python-3.0.12-py3-none-any.whl").write_bytes(b"wheel" * 100)
    (d / "config.toml").write_text((REPO / "edge_agent/config.example.toml").read_text())
    (d / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n")
    (d / "device.crt").write_text("-----BEGIN CERTIFICATE-----\nDEV\n-----END CERTIFICATE-----\n")
    (d / "device.key").write_text("-----BEGIN PRIVATE KEY-----\nSECRET\n-----END PRIVATE KEY-----\n")
    (d / "id.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAbc user@host\n")
    return {
        k: d / v
        for k, v in {
            "wheels": "wheels",
            "config": "config.toml",
            "ca": "ca.crt",
            "cert": "device.crt",
            "key": "device.key",
            "ssh_key": "id.pub",
        }.items()
    }


def flash(target: list[str], inputs: dict[str, Path], *extra: str) -> int:
    args = ["flash", *target, "--hostname", "edge-7", "--user", "pi"]
    for name, path in inputs.items():
        args += [f"--{name.replace('_', '-')}", str(path)]
    return main([*args, *extra])


def test_bookworm_image_gets_firstrun(tmp_path: Path, inputs: dict[str, Path]) -> None:
    image = build_image(tmp_path, {"cmdline.txt": CMDLINE.encode(), "config.txt": b"arm_64bit=1\n"})
    assert (
        flash(["--image", str(image)], inputs, "--wifi-ssid", "farm net", "--wifi-password", "s3cret-pass")
        == 0
    )

    cmdline = read_back(image, "cmdline.txt", tmp_path).decode()
    assert cmdline.count("\n") == 1 and cmdline.startswith(CMDLINE.strip() + " systemd.run=/boot/firstrun.sh")
    script = read_back(image, "firstrun.sh", tmp_path).decode()
    assert MARKER in script and "NAME=edge-7" in script and "ssid=farm net" in script
    assert (
        "s3cret-pass" not in script
        and f"psk={Device('e', 'pi', 'k', 'farm net', 's3cret-pass').wifi_psk}\n" in script
    )
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)
    install = read_back(image, "pikit/install.sh", tmp_path).decode()
    subprocess.run(["bash", "-n"], input=install.encode(), check=True)
    assert 'rm -rf "$PAYLOAD"' in install and "chmod 0600 /etc/edge-agent/tls/edge-agent.pem" in install
    assert b"SECRET" in read_back(image, "pikit/tls/device.key", tmp_path)
    assert "pikit_edge_agent-0.1.0-py3-none-any.whl" in listing(image)
    assert (
        "ReadWritePaths=/var/lib/edge-agent/spool"
        in read_back(image, "pikit/edge-agent.service", tmp_path).decode()
    )


def test_trixie_image_gets_cloud_init(tmp_path: Path, inputs: dict[str, Path]) -> None:
    files = {
        "cmdline.txt": CMDLINE.encode(),
        "config.txt": b"",
        "user-data": TRIXIE_USER_DATA.encode(),
        "meta-data": b"instance-id: rpi\n",
        "network-config": b"network: {version: 2}\n",
    }
    image = build_image(tmp_path, files)
    assert flash(["--image", str(image)], inputs) == 0

    user_data = read_back(image, "user-data", tmp_path).decode()
    assert user_data.startswith("#cloud-config\n")
    doc = json.loads(user_data.split("\n", 2)[2])  # JSON is YAML
    assert doc["hostname"] == "edge-7"
    assert doc["users"][0]["ssh_authorized_keys"] == ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAbc user@host"]
    assert ["bash", "/boot/firmware/pikit/install.sh", "--start"] in doc["runcmd"]
    assert read_back(image, "meta-data", tmp_path).decode().count("instance-id: pikit-edge-7-") == 1
    assert read_back(image, "network-config", tmp_path) == b"network: {version: 2}\n"  # no Wi-Fi asked for
    assert read_back(image, "cmdline.txt", tmp_path).decode() == CMDLINE.strip() + " ds=nocloud\n"
    assert "firstrun.sh" not in listing(image)


def test_the_wifi_key_is_the_80211i_psk_not_the_passphrase() -> None:
    # IEEE 802.11i-2004, annex H.4.1, first test vector.
    device = Device("edge-7", "pi", "k", wifi_ssid="IEEE", wifi_password="password")
    assert device.wifi_psk == "f42c6fc52df0ebef9ebb4b90b38a5f902e83fe1b135a70e23aed762e9710a12e"


def test_cloud_init_network_config_holds_the_psk(tmp_path: Path) -> None:
    device = Device("edge-7", "pi", "ssh-ed25519 AAAA u@h", wifi_ssid="farm net", wifi_password="s3cret-pass")
    network = cloud_init_files(device)["network-config"].decode()
    assert "s3cret-pass" not in network
    assert json.loads(network.split("\n", 1)[1])["network"]["wifis"]["wlan0"]["access-points"] == {
        "farm net": {"password": device.wifi_psk}
    }


def test_explicit_format_overrides_detection(tmp_path: Path, inputs: dict[str, Path]) -> None:
    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "cmdline.txt").write_text(CMDLINE)
    (boot / "config.txt").write_text("")
    assert flash(["--boot-dir", str(boot)], inputs, "--format", "cloud-init") == 0
    assert (boot / "user-data").exists() and not (boot / "firstrun.sh").exists()
    assert (boot / "pikit/tls/device.key").read_text().startswith("-----BEGIN PRIVATE KEY")


def test_refusals_name_the_problem(
    tmp_path: Path, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    not_pi = build_image(tmp_path, {"readme.txt": b"hello"})
    assert flash(["--image", str(not_pi)], inputs) == 2
    assert "not a Raspberry Pi OS boot partition" in capsys.readouterr().err

    raw = tmp_path / "raw.img"
    raw.write_bytes(b"\0" * 4096)
    assert flash(["--image", str(raw)], inputs) == 2
    assert "no partition table" in capsys.readouterr().err

    boot = tmp_path / "bookworm"
    boot.mkdir()
    (boot / "cmdline.txt").write_text(CMDLINE)
    (boot / "config.txt").write_text("")
    assert flash(["--boot-dir", str(boot)], inputs) == 0
    first = (boot / "firstrun.sh").read_text()
    assert flash(["--boot-dir", str(boot)], inputs) == 2
    assert "already customised" in capsys.readouterr().err
    assert flash(["--boot-dir", str(boot)], inputs, "--force", "--hostname", "edge-8") == 0
    assert first != (boot / "firstrun.sh").read_text()
    assert (boot / "cmdline.txt").read_text().count("systemd.run=") == 1

    assert flash(["--boot-dir", str(boot)], {**inputs, "ssh_key": inputs["config"]}, "--force") == 2
    assert "--ssh-key" in capsys.readouterr().err


def test_a_full_partition_is_refused_and_left_alone(
    tmp_path: Path, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    (inputs["wheels"] / "pikit_edge_agent-0.1.0-py3-none-any.whl").write_bytes(os.urandom(40 * 1024 * 1024))
    image = build_image(tmp_path, {"cmdline.txt": CMDLINE.encode(), "config.txt": b""}, fat_mb=34)
    assert flash(["--image", str(image)], inputs) == 2
    assert "no space" in capsys.readouterr().err
    assert read_back(image, "cmdline.txt", tmp_path) == CMDLINE.encode()
    assert "pikit" not in listing(image).lower().replace("pi.img", "")


def test_the_flashed_unit_is_rendered_from_the_roles(tmp_path: Path) -> None:
    """flash writes no unit of its own: the edge_agent role's values in the service_unit pattern."""
    flashed = unit("/srv/spool", "edge-7", [])
    assert flashed.startswith(f"# {MARKER}\n[Unit]\nDescription=pikit edge agent (edge-7)\n")
    assert (
        "ExecStart=/opt/edge-agent/current/venv/bin/edge-agent run --config /etc/edge-agent/config.toml\n"
        in flashed
    )
    assert "ReadWritePaths=/srv/spool\n" in flashed and "PrivateDevices=yes\n" in flashed
    assert "MemoryDenyWriteExecute=yes\n" in flashed, "Python has no JIT"
    on_a_bus = unit("/srv/spool", "edge-7", ["/dev/i2c-1"])
    assert "PrivateDevices=no\nDevicePolicy=closed\nDeviceAllow=/dev/i2c-1 rw\n" in on_a_bus
    roles = tmp_path / "roles"
    for role in ("edge_agent", "service_unit", "pikit"):
        shutil.copytree(REPO / f"roles/{role}", roles / role)
    values = roles / "edge_agent/vars/main.yml"
    values.write_text(values.read_text().replace("  limit_nofile: 4096", "  limit_nofile: 777"))
    changed = unitfile.render(
        MARKER, {"edge_agent_spool_dir": "/srv/spool", "edge_agent_device_id": "e"}, roles
    )
    assert "LimitNOFILE=777\n" in changed, "a change to the role's values reaches the flashed unit"


def test_the_flashed_install_puts_the_agent_where_the_role_does(tmp_path: Path) -> None:
    """flash states no path of its own: install.sh takes each from the role's `_edge_agent_layout`."""
    script = install_sh(layout(), unit_name())
    assert 'install -m 0640 -g edge-agent "$PAYLOAD/config.toml" /etc/edge-agent/config.toml\n' in script
    assert "> /etc/edge-agent/tls/edge-agent.pem)" in script
    assert 'ln -sfn releases/"$RELEASE" /opt/edge-agent/current\n' in script
    assert "--home-dir /srv/pikit/edge-agent " in script, "the common role's home for a service user"
    assert "systemctl enable edge-agent\n" in script
    roles = tmp_path / "roles"
    for role in ("edge_agent", "service_unit", "pikit"):
        shutil.copytree(REPO / f"roles/{role}", roles / role)
    defaults = roles / "edge_agent/defaults/main.yml"
    defaults.write_text(
        defaults.read_text().replace("edge_agent_conf_dir: /etc/edge-agent", "edge_agent_conf_dir: /etc/ea")
    )
    moved = install_sh(unitfile.layout(roles=roles), unit_name())
    assert "/etc/ea/config.toml\n" in moved and "/etc/ea/tls/edge-agent.pem)" in moved
    assert "/etc/edge-agent" not in moved


def test_several_agent_releases_in_the_wheels_are_refused(
    tmp_path: Path, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    (inputs["wheels"] / "pikit_edge_agent-0.1.1-py3-none-any.whl").write_bytes(b"wheel" * 100)
    boot = tmp_path / "bookworm"
    boot.mkdir()
    (boot / "cmdline.txt").write_text(CMDLINE)
    (boot / "config.txt").write_text("")
    assert flash(["--boot-dir", str(boot)], inputs) == 2
    err = capsys.readouterr().err
    assert "several agent releases" in err and "0.1.1" in err
    assert not (boot / "firstrun.sh").exists(), "nothing written"


@pytest.mark.parametrize(
    ("sensors", "named"),
    [
        ('sensors = ["bme280"]', "sensors[0] must be a table ([[sensors]]), not 'bme280'"),
        ('sensors = "bme280"', "sensors must be an array of tables"),
        ("", "spool.directory or device_id is not readable"),
    ],
)
def test_a_config_whose_sensors_are_not_tables_is_refused_by_name(
    tmp_path: Path, sensors: str, named: str
) -> None:
    config = tmp_path / "config.toml"
    body = (
        'device_id = "edge-7"\n[spool]\ndirectory = "/srv/spool"\n' if sensors else 'device_id = "edge-7"\n'
    )
    config.write_text(f"{sensors}\n{body}")
    with pytest.raises(FlashError, match=re.escape(named)):
        agent_settings(config)


def test_the_role_installs_every_unit_value_that_flash_renders() -> None:
    """The role's include of service_unit passes each of `_edge_agent_unit`'s values, by its name,
    and nothing else: so that the flashed unit and the installed one cannot drift apart."""
    tasks = yaml.safe_load((REPO / "roles/edge_agent/tasks/main.yml").read_text())
    (include,) = [
        t for t in tasks if (t.get("ansible.builtin.include_role") or {}).get("name") == "service_unit"
    ]
    values = unitfile.role_values()
    assert include["vars"] == {
        name: "{{ _edge_agent_unit." + name.removeprefix("service_unit_") + " }}" for name in values
    }
    defaults = yaml.safe_load((REPO / "roles/service_unit/defaults/main.yml").read_text())
    assert set(values) <= set(defaults), "every value is one of service_unit's variables"
