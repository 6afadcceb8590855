"""pi_base's survey: what a node is, and which of the role's items apply to it, or why not."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from pikit_testkit.modules import from_file

from pikit import REPO


def load() -> ModuleType:
    return from_file("pi_base_facts", REPO / "roles/pi_base/library/pi_base_facts.py")


SETTINGS = {
    "hostname": True,
    "static_address": "192.168.1.11/24",
    "time_sync_wait": True,
    "noatime": True,
    "noatime_mounts": ["/", "/srv/pikit"],
    "fstrim": True,
    "swap_off_groups": ["kafka_broker"],
    "zram": True,
    "cgroup_memory_groups": ["spark_worker"],
    "watchdog_sec": 15,
}
CMDLINE = "console=tty1 root=PARTUUID=6c586e13-02 rootwait cgroup_disable=memory\n"
FSTAB = """proc            /proc           proc    defaults          0       0
PARTUUID=6c586e13-01  /boot/firmware  vfat    defaults          0       2
PARTUUID=6c586e13-02  /               ext4    defaults,noatime  0       1
/dev/sda1       /srv            ext4    defaults,relatime,nofail 0 2
# /dev/sdb1     /mnt            ext4    defaults          0       2
/var/swap       none            swap    sw                0       0
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def a_pi(root: Path) -> Path:
    return write(
        root,
        {
            "proc/device-tree/model": "Raspberry Pi 4 Model B Rev 1.4\x00",
            "boot/firmware/cmdline.txt": CMDLINE,
            "etc/fstab": FSTAB,
            "proc/swaps": "Filename Type Size Used Priority\n/var/swap file 102396 0 -2\n",
            "dev/watchdog": "",
            "sys/devices/platform/soc/soc:firmware/get_throttled": "50005\n",
            "sys/class/thermal/thermal_zone0/temp": "81234\n",
            "usr/bin/rpi-eeprom-update": "",
            "lib/systemd/system/chrony-wait.service": "",
            "etc/init.d/dphys-swapfile": "",
        },
    )


def no_commands(argv: list[str]) -> str | None:
    return None


def test_on_a_pi_every_item_applies_and_throttling_and_heat_are_warned_of(tmp_path: Path) -> None:
    nmcli = {"nmcli": "Wired connection 1:eth0\n"}
    found = load().survey(
        a_pi(tmp_path), SETTINGS, ["kafka_broker", "spark_worker"], lambda a: nmcli.get(a[0])
    )
    plan, pi = found["plan"], found["pi"]
    assert {item for item, verdict in plan.items() if verdict != "apply"} == {"zram"}
    assert plan["zram"] == "skip - swap is off here (pi_base_swap_off_groups)"
    assert pi["model"] == "Raspberry Pi 4 Model B Rev 1.4"
    assert pi["container"] is None
    assert pi["nm_connections"] == ["Wired connection 1"]
    assert pi["cmdline_path"] == "/boot/firmware/cmdline.txt"
    assert pi["cmdline_wanted"] == (
        "console=tty1 root=PARTUUID=6c586e13-02 rootwait cgroup_enable=memory cgroup_memory=1"
    )
    # / has noatime already; /srv/pikit lives on /srv, whose relatime becomes noatime.
    assert pi["noatime_changes"] == [
        {"src": "/dev/sda1", "path": "/srv", "fstype": "ext4", "opts": "defaults,noatime,nofail"}
    ]
    assert pi["swap_active"] and pi["dphys_swapfile"] and pi["watchdog"] and pi["eeprom_tool"]
    assert found["warnings"] == [
        "the firmware reports under-voltage now, throttled now, under-voltage has occurred, "
        "throttling has occurred (get_throttled 0x50005)",
        "the SoC is at 81.2 C",
    ]


def test_vcgencmd_is_read_before_sysfs_and_a_cool_unthrottled_pi_warns_of_nothing(tmp_path: Path) -> None:
    root = write(a_pi(tmp_path), {"sys/class/thermal/thermal_zone0/temp": "48500\n"})
    found = load().survey(root, SETTINGS, [], lambda a: "throttled=0x0\n" if a[0] == "vcgencmd" else None)
    assert found["pi"]["throttled"] == 0
    assert found["warnings"] == []
    assert found["plan"]["swap_off"] == "skip - not a Kafka node (pi_base_swap_off_groups)"
    assert (
        found["plan"]["cgroup_memory"]
        == "skip - no Spark or container runtime here (pi_base_cgroup_memory_groups)"
    )
    assert found["plan"]["static_address"] == "skip - no NetworkManager (nmcli) here"
    assert found["plan"]["zram"] == "apply"


def test_in_a_container_the_hardware_items_are_skipped_and_say_so(tmp_path: Path) -> None:
    root = write(tmp_path, {"run/.containerenv": "", "proc/swaps": "Filename Type\n/dev/zram0 partition\n"})
    settings = {**SETTINGS, "static_address": "", "time_sync_wait": False}
    found = load().survey(root, settings, ["kafka_broker", "spark_worker"], no_commands)
    assert found["summary"][5] == "journald: apply"
    assert found["plan"] == {
        "hostname": "skip - in a podman container",
        "static_address": "skip - no pi_base_static_address set",
        "time_sync_wait": "skip - turned off (pi_base_time_sync_wait)",
        "noatime": "skip - in a podman container",
        "fstrim": "skip - in a podman container",
        "journald": "apply",
        "swap_off": "skip - in a podman container",
        "zram": "skip - swap is off here (pi_base_swap_off_groups)",
        "cgroup_memory": "skip - no cmdline.txt under /boot/firmware or /boot (not a Pi)",
        "watchdog": "skip - in a podman container",
        "eeprom": "skip - in a podman container",
        "thermal": "skip - in a podman container",
    }


def test_the_kernel_command_line_keeps_its_order_and_gains_the_tokens_once() -> None:
    wanted = load().cmdline_wanted
    assert wanted("a=1 cgroup_memory=1 b") == "a=1 cgroup_memory=1 b cgroup_enable=memory"
    once = wanted("console=tty1 root=/dev/mmcblk0p2 cgroup_disable=memory")
    assert wanted(once) == once


def test_noatime_replaces_the_atime_options_and_keeps_the_rest() -> None:
    with_noatime = load().with_noatime
    assert with_noatime("defaults") == "defaults,noatime"
    assert with_noatime("rw,relatime,errors=remount-ro") == "noatime,rw,errors=remount-ro"
