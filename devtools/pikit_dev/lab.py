"""The lab: podman containers with systemd and sshd that stand in for Raspberry Pis.

This is the project's one create/destroy implementation: `make lab`, the demo,
molecule's create/destroy playbooks and the tests all call it.

    python -m pikit_dev.lab up   [--inventory inventory/lab] [--arch arm64]
    python -m pikit_dev.lab up   --lab NAME --subnet CIDR --node name=ip [--node ...]
                             [--tmpfs name:path:size ...]
                             [--node-arch name=armhf ...]
    python -m pikit_dev.lab reflash NODE [NODE ...] [--inventory inventory/lab] [--suite trixie]
    python -m pikit_dev.lab down [--lab NAME | --all]
    python -m pikit_dev.lab status
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pikit import REPO
from pikit.phases import die, phase, run, say
from pikit_dev import cpu_share
from pikit_dev.lab_image import DEFAULT_SUITE, LAB_USER, SUITES, ensure_image, host_arch, lab_home, ssh_key

DEFAULT_LAB = "pikit-lab"
LABEL = "pikit.lab"
# The network namespace's kernel settings that common_sysctl_where_supported gives a Pi at boot. A
# container cannot write its /proc/sys, so the lab sets them as it starts each node, where the
# host's kernel has them (tests/unit/test_lab_spec.py keeps the two in step).
NETNS_SYSCTLS = {"net.ipv4.tcp_rto_max_ms": 10000}


@dataclass(frozen=True)
class Node:
    name: str
    ip: str
    # (path, size) pairs: a small RAM disk mounted at path, e.g. a data directory that must fill.
    tmpfs: tuple[tuple[str, str], ...] = ()
    # The node's own architecture (emulated under qemu-user where it is not the host's), else the lab's.
    arch: str | None = None
    # The node's own OS release (`lab_suite` set for the host), else the lab's: a fleet moving from
    # Bookworm to Trixie one Pi at a time.
    suite: str | None = None


@dataclass(frozen=True)
class LabSpec:
    name: str
    subnet: str
    nodes: tuple[Node, ...]
    suite: str = DEFAULT_SUITE
    # Nodes that run only on CPU every other cgroup leaves unused (pikit_dev.cpu_share, IDLE_LAB):
    # make test-ops' molecule scenarios, beside the end-to-end suite's bounded faults
    # (tests/molecule/create.yml). A lab read from an inventory runs at the lab's weight.
    idle: bool = False

    def validate(self) -> None:
        net = ipaddress.ip_network(self.subnet)
        seen: dict[str, str] = {}
        for node in self.nodes:
            if ipaddress.ip_address(node.ip) not in net:
                die(f"host {node.name}: ansible_host {node.ip} is outside lab_subnet {self.subnet}")
            if node.ip in seen:
                die(f"hosts {seen[node.ip]} and {node.name} share ansible_host {node.ip}")
            seen[node.ip] = node.name


def spec_from_inventory(inventory: Path) -> LabSpec:
    """Read the lab's shape from the very inventory the playbooks use."""
    # The venv's own, beside this interpreter: a bench run as `python -m` has no venv on PATH.
    beside = Path(sys.executable).with_name("ansible-inventory")
    command = str(beside) if beside.exists() else "ansible-inventory"
    proc = run([command, "-i", inventory, "--list"], capture=True)
    data = json.loads(proc.stdout)
    hostvars: dict[str, dict[str, Any]] = data.get("_meta", {}).get("hostvars", {})
    if not hostvars:
        die(f"inventory {inventory} has no hosts")
    missing = [h for h, v in hostvars.items() if "ansible_host" not in v]
    if missing:
        die(f"inventory {inventory}: ansible_host is not set for {', '.join(sorted(missing))}")
    any_vars = next(iter(hostvars.values()))
    for key in ("lab_name", "lab_subnet"):
        if key not in any_vars:
            die(f"inventory {inventory}: {key} is not set (group_vars/all.yml)")
    return LabSpec(
        name=any_vars["lab_name"],
        subnet=any_vars["lab_subnet"],
        suite=DEFAULT_SUITE,
        # `lab_tmpfs: {path: size}`, as a molecule platform gives it: the node's small data disk.
        nodes=tuple(
            Node(
                h,
                v["ansible_host"],
                tuple(sorted(v.get("lab_tmpfs", {}).items())),
                suite=_suite(inventory, v.get("lab_suite", DEFAULT_SUITE)),
            )
            for h, v in sorted(hostvars.items())
        ),
    )


def _suite(inventory: Path, suite: str) -> str:
    if suite not in SUITES:
        die(f"inventory {inventory}: lab_suite is {suite!r}; the lab builds {' or '.join(SUITES)}")
    return suite


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return run(["podman", *args], capture=True, check=check)


def _ensure_network(spec: LabSpec) -> None:
    if _podman("network", "exists", spec.name, check=False).returncode == 0:
        return
    gateway = str(next(ipaddress.ip_network(spec.subnet).hosts()))
    _podman(
        "network",
        "create",
        "--subnet",
        spec.subnet,
        "--gateway",
        gateway,
        "--label",
        f"{LABEL}={spec.name}",
        spec.name,
    )


def _running_containers(lab: str | None) -> dict[str, str]:
    """name -> state of this lab's containers (every lab's when `lab` is None)."""
    flt = f"label={LABEL}={lab}" if lab else f"label={LABEL}"
    out = _podman("ps", "-a", "--filter", flt, "--format", "{{.Names}} {{.State}}").stdout.decode()
    return dict(line.split(maxsplit=1) for line in out.splitlines() if line.strip())


def _remove_containers(names: list[str], lab: str | None) -> None:
    """`podman rm -f`, retried: a systemd container that is still stopping makes podman
    refuse with "container state improper" (seen in CI); a moment later the removal goes through."""
    for attempt in range(6):
        result = _podman("rm", "-f", "-t", "2", *names, check=False)
        left = [name for name in names if name in _running_containers(lab)]
        if not left:
            return
        if attempt == 5:
            die(f"podman could not remove {', '.join(left)}:\n{result.stderr.decode(errors='replace')}")
        names = left
        time.sleep(2)


def _wait_for_ssh(node: Node, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((node.ip, 22), timeout=2) as conn:
                if conn.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.5)
    logs = _podman("logs", "--tail", "20", node.name, check=False).stdout.decode(errors="replace")
    die(f"{node.name} ({node.ip}): sshd did not answer in time; container log tail:\n{logs}")


def netns_sysctls(proc_sys: Path = Path("/proc/sys")) -> list[str]:
    """podman's --sysctl for each of NETNS_SYSCTLS that this kernel has (a key it lacks fails the start)."""
    return [
        f"--sysctl={key}={value}"
        for key, value in NETNS_SYSCTLS.items()
        if proc_sys.joinpath(*key.split(".")).exists()
    ]


def _cgroup_args(spec: LabSpec) -> list[str]:
    """podman's cgroup for the nodes: the idle cgroup's lab half where asked and the machine has
    one, else podman's own (libpod_parent, at the lab's weight)."""
    parent = cpu_share.idle_lab_parent() if spec.idle else None
    return [f"--cgroup-parent={parent}"] if parent else []


def up(spec: LabSpec, arch: str | None = None) -> None:
    spec.validate()
    arch = arch or host_arch()
    ssh_key()

    def image_of(node: Node) -> tuple[str, str]:
        return node.suite or spec.suite, node.arch or arch

    images = {key: ensure_image(*key) for key in sorted({image_of(node) for node in spec.nodes})}
    with phase(f"lab {spec.name}: {len(spec.nodes)} nodes on {spec.subnet}"):
        _ensure_network(spec)
        existing = _running_containers(spec.name)
        for node in spec.nodes:
            state = existing.get(node.name)
            # podman 4.3 (Debian 12) prints "Up 5 minutes ago" for {{.State}}, newer ones "running".
            if state is not None and (state == "running" or state.startswith("Up ")):
                continue
            if state is not None:
                _remove_containers([node.name], spec.name)
            _podman(
                "run",
                "-d",
                "--name",
                node.name,
                "--hostname",
                node.name,
                "--network",
                spec.name,
                "--ip",
                node.ip,
                "--systemd=always",
                *_cgroup_args(spec),
                # The firewall role loads nftables rules into the node's own network namespace.
                "--cap-add=NET_ADMIN",
                # systemd sets up a unit's sandbox (PrivateDevices=, ProtectSystem=, PrivateTmp=)
                # in mount namespaces, as PID 1 of a Pi does; its container interface asks that
                # the container keep CAP_SYS_ADMIN for this. Without it, Bookworm's systemd 252
                # ran the units unsandboxed, and Trixie's 257 refuses to start them.
                "--cap-add=SYS_ADMIN",
                # A private /etc/hosts: the common role manages it as on a real Pi.
                "--no-hosts",
                *netns_sysctls(),
                *(f"--tmpfs={path}:rw,size={size},mode=0755" for path, size in node.tmpfs),
                "--label",
                f"{LABEL}={spec.name}",
                "--arch",
                node.arch or arch,
                images[image_of(node)],
                "/sbin/init",
            )
        emulated = any((node.arch or arch) != host_arch() for node in spec.nodes)
        # Booting systemd in six containers takes ~15 s on an idle machine; make test starts this
        # lab beside another, the unit tests and a Kafka on two cores, where 60 s was too short.
        deadline = time.monotonic() + (300 if emulated else 180)
        for node in spec.nodes:
            _wait_for_ssh(node, deadline)
        for node in spec.nodes:
            say(f"{node.name:<16} {node.ip}")


def reflash(spec: LabSpec, names: list[str], suite: str | None = None) -> None:
    """Re-flash Pis: each container removed and started again from the image, so with the same name
    and address and an empty disk, as a Pi whose SD card was replaced or re-flashed with a newer
    Raspberry Pi OS (`suite`; else the node's own). The rest of the lab keeps running."""
    unknown = sorted(set(names) - {node.name for node in spec.nodes})
    if unknown:
        die(f"lab {spec.name} has no node {', '.join(unknown)}")
    with phase(f"re-flash {', '.join(names)}" + (f" with {suite}" if suite else "")):
        _remove_containers([name for name in names if name in _running_containers(spec.name)], spec.name)
    nodes = tuple(replace(node, suite=suite) if suite and node.name in names else node for node in spec.nodes)
    up(replace(spec, nodes=nodes))


def lose(spec: LabSpec, names: list[str]) -> None:
    """Pis lost for good, as when the power goes and the SD card dies with it: each container's
    network is cut first, so that no peer hears a connection close, then the container is removed
    with its disk. `up` (or `reflash`) brings blank ones back at the same addresses."""
    unknown = sorted(set(names) - {node.name for node in spec.nodes})
    if unknown:
        die(f"lab {spec.name} has no node {', '.join(unknown)}")
    with phase(f"lose {', '.join(names)}"):
        for name in names:
            pid = _podman("inspect", "-f", "{{.State.Pid}}", name).stdout.decode().strip()
            subprocess.run(["nsenter", "-t", pid, "-n", "ip", "link", "set", "eth0", "down"], check=True)
        _remove_containers(names, spec.name)


def down(lab: str | None) -> None:
    with phase(f"remove lab {lab or '(all pikit labs)'}"):
        names = list(_running_containers(lab))
        if names:
            _remove_containers(names, lab)
        flt = f"label={LABEL}={lab}" if lab else f"label={LABEL}"
        networks = _podman("network", "ls", "--filter", flt, "--format", "{{.Name}}").stdout.decode().split()
        if networks:
            _podman("network", "rm", "-f", *networks)
        volumes = _podman("volume", "ls", "--filter", flt, "--format", "{{.Name}}").stdout.decode().split()
        if volumes:
            _podman("volume", "rm", "-f", *volumes)
        # The lab's controller-side state (CA, format markers) dies with its nodes.
        states = [lab_home() / "state" / lab] if lab else list((lab_home() / "state").glob("*"))
        for state in states:
            shutil.rmtree(state, ignore_errors=True)
        say(f"removed {len(names)} containers, {len(networks)} networks")


def status() -> None:
    for name, state in sorted(_running_containers(None).items()):
        print(f"{name:<20} {state}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="build the image if needed and start the lab")
    p_up.add_argument("--inventory", type=Path, default=REPO / "inventory/lab")
    p_up.add_argument("--lab", help="lab name (with --node: not read from an inventory)")
    p_up.add_argument("--subnet")
    p_up.add_argument("--suite", default=DEFAULT_SUITE, choices=SUITES)
    p_up.add_argument("--node", action="append", default=[], metavar="NAME=IP")
    p_up.add_argument(
        "--tmpfs",
        action="append",
        default=[],
        metavar="NAME:PATH:SIZE",
        help="a RAM disk of SIZE at PATH on NAME",
    )
    p_up.add_argument("--arch", help="image architecture, e.g. arm64 (emulated)")
    p_up.add_argument(
        "--idle", action="store_true", help="run the nodes only on CPU that nothing else wants (SCHED_IDLE)"
    )
    p_up.add_argument(
        "--node-arch", action="append", default=[], metavar="NAME=ARCH", help="NAME's own architecture"
    )
    p_reflash = sub.add_parser("reflash", help="start nodes again from the image, with empty disks")
    p_reflash.add_argument("nodes", nargs="+", metavar="NODE")
    p_reflash.add_argument("--inventory", type=Path, default=REPO / "inventory/lab")
    p_reflash.add_argument("--suite", choices=SUITES, help="the release flashed (default: the node's own)")
    p_down = sub.add_parser("down", help="remove a lab's containers and network")
    p_down.add_argument("--lab", default=DEFAULT_LAB)
    p_down.add_argument("--all", action="store_true", help="every pikit lab on this machine")
    sub.add_parser("status")
    sub.add_parser("image", help="build the base image only").add_argument("--arch")
    sub.add_parser("user", help="the user the lab's nodes are reached as (with sudo)")
    args = parser.parse_args(argv)

    if args.command == "up":
        if args.node:
            if not (args.lab and args.subnet):
                die("--node needs --lab and --subnet")
            disks: dict[str, list[tuple[str, str]]] = {}
            for item in args.tmpfs:
                name, path, size = item.split(":")
                disks.setdefault(name, []).append((path, size))
            arches = dict(item.split("=", 1) for item in args.node_arch)
            nodes = tuple(
                Node(name, ip, tuple(disks.get(name, [])), arches.get(name))
                for name, ip in (item.split("=", 1) for item in args.node)
            )
            spec = LabSpec(args.lab, args.subnet, nodes, args.suite, args.idle)
        else:
            spec = spec_from_inventory(args.inventory)
        up(spec, args.arch)
    elif args.command == "reflash":
        reflash(spec_from_inventory(args.inventory), args.nodes, args.suite)
    elif args.command == "down":
        down(None if args.all else args.lab)
    elif args.command == "user":
        print(LAB_USER)
    elif args.command == "image":
        ssh_key()
        ensure_image(arch=args.arch)
    else:
        status()


if __name__ == "__main__":
    main()
