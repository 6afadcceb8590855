#!/usr/bin/python
"""What this node is (a Raspberry Pi, a container, which boot files and devices it has) and, for
each item of the pi_base role, whether it applies here or is skipped, and why.

One survey decides every item, so that the play shows its plan in one place and each task only
asks `plan.<item> == 'apply'`. Reads files only (and `vcgencmd`, `nmcli` where present).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOCUMENTATION = r"""
module: pi_base_facts
short_description: Survey a node for the pi_base role and plan which of its items apply
description:
  - Reports the Pi model, whether the node is a container, its kernel command line file, swap,
    watchdog, throttling flags, SoC temperature, NetworkManager and the fstab entries that lack noatime.
  - Returns C(plan), each item of the role mapped to C(apply) or C(skip - <reason>), and warns when
    the firmware reports throttling or under-voltage, or the SoC is hot.
options:
  settings: {type: dict, required: true, description: The role's settings (see the role's tasks/main.yml).}
  groups: {type: list, elements: str, default: [], description: The host's inventory groups.}
  root: {type: path, default: /, description: Where the node's filesystem starts (tests).}
"""

APPLY = "apply"
CMDLINES = ("boot/firmware/cmdline.txt", "boot/cmdline.txt")  # Bookworm and later; before
THROTTLED_SYSFS = "sys/devices/platform/soc/soc:firmware/get_throttled"
CGROUP_MEMORY = ("cgroup_enable=memory", "cgroup_memory=1")
UNIT_DIRS = ("lib/systemd/system", "usr/lib/systemd/system")
HOT_C = 80.0
# Bits of `vcgencmd get_throttled` (the Raspberry Pi documentation's table).
THROTTLE_BITS = {
    0: "under-voltage now",
    1: "ARM frequency capped now",
    2: "throttled now",
    3: "soft temperature limit now",
    16: "under-voltage has occurred",
    17: "ARM frequency capping has occurred",
    18: "throttling has occurred",
    19: "soft temperature limit has occurred",
}

Runner = Callable[[list[str]], str | None]


def _run(argv: list[str]) -> str | None:
    """A command's stdout, or None when it is absent or fails."""
    if not shutil.which(argv[0]):
        return None
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=20)
    return proc.stdout if proc.returncode == 0 else None


def _read(root: Path, path: str) -> str | None:
    try:
        return (root / path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def container(root: Path) -> str | None:
    """The container runtime this node runs in, or None on hardware or a VM."""
    if (root / "run/.containerenv").exists():
        return "podman"
    if (root / ".dockerenv").exists():
        return "docker"
    environ = (root / "proc/1/environ").read_bytes() if (root / "proc/1/environ").exists() else b""
    found = re.search(rb"(?:^|\x00)container=([^\x00]+)", environ)
    return found.group(1).decode() if found else None


def throttled(root: Path, run: Runner) -> int | None:
    out = run(["vcgencmd", "get_throttled"])
    if out and "=" in out:
        return int(out.split("=", 1)[1].strip(), 16)
    raw = _read(root, THROTTLED_SYSFS)
    return int(raw.strip(), 16) if raw and raw.strip() else None


def throttle_flags(value: int) -> list[str]:
    return [text for bit, text in THROTTLE_BITS.items() if value >> bit & 1]


def cmdline_wanted(current: str) -> str:
    """The kernel command line with the memory cgroup enabled: `cgroup_disable=memory` removed,
    the two enabling tokens added once, everything else kept in its order (one line)."""
    tokens = [t for t in current.split() if t != "cgroup_disable=memory"]
    tokens += [t for t in CGROUP_MEMORY if t not in tokens]
    return " ".join(tokens)


def fstab_entries(text: str) -> list[dict[str, str]]:
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and not fields[0].startswith("#"):
            entries.append({"src": fields[0], "path": fields[1], "fstype": fields[2], "opts": fields[3]})
    return entries


def with_noatime(opts: str) -> str:
    given = opts.split(",")
    kept = [o for o in given if o not in ("atime", "relatime", "strictatime", "noatime", "defaults")]
    return ",".join(["defaults", "noatime", *kept] if "defaults" in given else ["noatime", *kept])


def mount_of(path: str, entries: list[dict[str, str]]) -> dict[str, str] | None:
    """The fstab entry whose mount point holds `path` (the longest that is a prefix of it)."""
    holders = [e for e in entries if path == e["path"] or path.startswith(e["path"].rstrip("/") + "/")]
    return max(holders, key=lambda e: len(e["path"]), default=None)


def noatime_changes(mounts: list[str], entries: list[dict[str, str]]) -> list[dict[str, str]]:
    """The fstab entries holding `mounts` that lack noatime, each with the options it should have."""
    changes: dict[str, dict[str, str]] = {}
    for path in mounts:
        entry = mount_of(path, entries)
        if entry and "noatime" not in entry["opts"].split(","):
            changes[entry["path"]] = {**entry, "opts": with_noatime(entry["opts"])}
    return [changes[p] for p in sorted(changes)]


def survey(root: Path, settings: dict[str, Any], groups: list[str], run: Runner = _run) -> dict[str, Any]:
    """The node's facts, the plan of every item and the warnings to give."""
    runtime = container(root)
    model = (_read(root, "proc/device-tree/model") or "").rstrip("\x00\n") or None
    cmdline_file = next((p for p in CMDLINES if (root / p).is_file()), None)
    cmdline_path = f"/{cmdline_file}" if cmdline_file else None
    cmdline = (_read(root, cmdline_file) or "").strip() if cmdline_file else ""
    swaps = (_read(root, "proc/swaps") or "").splitlines()[1:]
    fstab = fstab_entries(_read(root, "etc/fstab") or "")
    flags = throttled(root, run) if not runtime else None
    temp_raw = _read(root, "sys/class/thermal/thermal_zone0/temp")
    soc_c = int(temp_raw.strip()) / 1000 if temp_raw and temp_raw.strip().isdigit() and not runtime else None
    nmcli = None if runtime else run(["nmcli", "-t", "-f", "NAME,DEVICE", "connection", "show", "--active"])
    in_groups = set(groups)
    facts: dict[str, Any] = {
        "model": model,
        "container": runtime,
        "cmdline_path": cmdline_path,
        "cmdline": cmdline,
        "swap_active": bool(swaps),
        "watchdog": (root / "dev/watchdog").exists(),
        "throttled": flags,
        "soc_temp_c": soc_c,
        "networkmanager": nmcli is not None,
        "nm_connections": [line.split(":", 1)[0] for line in (nmcli or "").splitlines() if line],
        "noatime_changes": noatime_changes(settings.get("noatime_mounts", ["/"]), fstab),
        "eeprom_tool": any((root / d / "rpi-eeprom-update").exists() for d in ("usr/bin", "usr/sbin")),
        "dphys_swapfile": (root / "etc/init.d/dphys-swapfile").exists()
        or any((root / d / "dphys-swapfile.service").exists() for d in UNIT_DIRS),
        "chrony_wait": any((root / d / "chrony-wait.service").exists() for d in UNIT_DIRS),
    }

    def decide(wanted: bool, off: str, *needs: tuple[bool, str]) -> str:
        if not wanted:
            return f"skip - {off}"
        for ok, why in needs:
            if not ok:
                return f"skip - {why}"
        return APPLY

    not_container = (not runtime, f"in a {runtime} container")
    swap_group = bool(in_groups & set(settings.get("swap_off_groups", [])))
    cgroup_group = bool(in_groups & set(settings.get("cgroup_memory_groups", [])))
    plan = {
        "hostname": decide(settings.get("hostname", True), "turned off (pi_base_hostname)", not_container),
        "static_address": decide(
            bool(settings.get("static_address")),
            "no pi_base_static_address set",
            not_container,
            (facts["networkmanager"], "no NetworkManager (nmcli) here"),
        ),
        "time_sync_wait": decide(
            settings.get("time_sync_wait", True),
            "turned off (pi_base_time_sync_wait)",
            (facts["chrony_wait"], "chrony-wait.service is not installed"),
        ),
        "noatime": decide(
            settings.get("noatime", True),
            "turned off (pi_base_noatime)",
            not_container,
            (bool(fstab), "no /etc/fstab entries"),
        ),
        "fstrim": decide(settings.get("fstrim", True), "turned off (pi_base_fstrim)", not_container),
        "journald": APPLY,
        "swap_off": decide(
            swap_group,
            "not a Kafka node (pi_base_swap_off_groups)",
            not_container,
        ),
        "zram": decide(
            bool(settings.get("zram")) and not swap_group,
            "swap is off here (pi_base_swap_off_groups)" if swap_group else "turned off (pi_base_zram)",
            not_container,
        ),
        "cgroup_memory": decide(
            cgroup_group,
            "no Spark or container runtime here (pi_base_cgroup_memory_groups)",
            (cmdline_path is not None, "no cmdline.txt under /boot/firmware or /boot (not a Pi)"),
        ),
        "watchdog": decide(
            int(settings.get("watchdog_sec", 15)) > 0,
            "turned off (pi_base_watchdog_sec: 0)",
            not_container,
            (facts["watchdog"], "no /dev/watchdog"),
        ),
        "eeprom": decide(
            True, "", not_container, (facts["eeprom_tool"], "no rpi-eeprom-update (a Pi 4 or 5 has)")
        ),
        "thermal": decide(
            True,
            "",
            not_container,
            (flags is not None or soc_c is not None, "no firmware flags nor SoC sensor"),
        ),
    }
    if cgroup_group and plan["cgroup_memory"] == APPLY:
        facts["cmdline_wanted"] = cmdline_wanted(cmdline)
    warnings = []
    if flags:
        warnings.append(f"the firmware reports {', '.join(throttle_flags(flags))} (get_throttled {flags:#x})")
    if soc_c is not None and soc_c >= HOT_C:
        warnings.append(f"the SoC is at {soc_c:.1f} C")
    summary = [f"{item}: {verdict}" for item, verdict in plan.items()]
    return {"pi": facts, "plan": plan, "summary": summary, "warnings": warnings}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "settings": {"type": "dict", "required": True},
            "groups": {"type": "list", "elements": "str", "default": []},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    found = survey(Path(module.params["root"]), module.params["settings"], module.params["groups"])
    for warning in found.pop("warnings"):
        module.warn(warning)
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    os.environ.setdefault("LC_ALL", "C")
    main()
