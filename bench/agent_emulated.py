"""The agent's RSS and CPU at 10 readings/s on emulated arm64 and armhf, beside a native agent.

Runs on the lab of molecule's edge_agent/emulated scenario (`make bench-emulated` creates and
converges it with the rate below, runs this, and destroys it): three devices, emu-amd64 (native),
emu-arm64 and emu-armhf (qemu-user), each running the deployed agent with the same configuration
(one simulated sensor, 2 metrics every 0.2 s = 10 readings/s, mTLS to the same native broker,
acks=all, zstd, the metrics endpoint on). The three run at once, so the machine's noise falls on
all of them; each round restarts them, waits out their start-up, then samples every second.

Under qemu-user the process the kernel accounts is the emulator running the agent: its RSS holds
the emulator and its translation cache, its CPU the translation too. The figures are relative to
the native agent on this machine, never a Pi's.

    .venv/bin/python -m bench.agent_emulated [--seconds 120] [--warmup 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from dataclasses import dataclass, field

DEVICES = {"emu-amd64": "amd64 (native)", "emu-arm64": "arm64 (qemu-user)", "emu-armhf": "armhf (qemu-user)"}
BASELINE = "emu-amd64"
METRICS = (
    "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9108/metrics').read().decode())"
)


def podman_exec(device: str, *argv: str) -> str:
    return subprocess.run(
        ["podman", "exec", device, *argv], capture_output=True, text=True, check=True
    ).stdout


def main_pid(device: str) -> int:
    return int(podman_exec(device, "systemctl", "show", "-p", "MainPID", "--value", "edge-agent").strip())


def cpu_seconds(device: str, pid: int) -> float:
    stat = podman_exec(device, "cat", f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
    ticks = int(podman_exec(device, "getconf", "CLK_TCK").strip())
    return (int(stat[11]) + int(stat[12])) / ticks


def rss_kib(device: str, pid: int) -> int:
    status = podman_exec(device, "cat", f"/proc/{pid}/status")
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))


def readings_taken(device: str) -> float:
    out = podman_exec(device, "python3", "-c", METRICS)
    return float(
        next(
            line.split()[1]
            for line in out.splitlines()
            if line.startswith("edge_agent_readings_taken_total ")
        )
    )


@dataclass
class Run:
    cpu_share: float  # of one core, over the window
    rss_mib: float  # mean over the window
    rate: float  # readings taken per second over the window


@dataclass
class Results:
    runs: dict[str, list[Run]] = field(default_factory=lambda: {d: [] for d in DEVICES})


def one_round(seconds: float, warmup: float) -> dict[str, Run]:
    for device in DEVICES:
        podman_exec(device, "systemctl", "restart", "edge-agent")
    time.sleep(warmup)
    pids = {d: main_pid(d) for d in DEVICES}
    cpu0 = {d: cpu_seconds(d, pids[d]) for d in DEVICES}
    taken0 = {d: readings_taken(d) for d in DEVICES}
    started = time.monotonic()
    rss: dict[str, list[int]] = {d: [] for d in DEVICES}
    while time.monotonic() - started < seconds:
        for device in DEVICES:
            rss[device].append(rss_kib(device, pids[device]))
        time.sleep(1.0)
    elapsed = time.monotonic() - started
    runs = {}
    for device in DEVICES:
        assert main_pid(device) == pids[device], f"{device}: the agent restarted during the window"
        runs[device] = Run(
            cpu_share=(cpu_seconds(device, pids[device]) - cpu0[device]) / elapsed,
            rss_mib=statistics.mean(rss[device]) / 1024,
            rate=(readings_taken(device) - taken0[device]) / elapsed,
        )
    return runs


def print_table(results: Results) -> None:
    base_cpu = statistics.median(r.cpu_share for r in results.runs[BASELINE])
    base_rss = statistics.median(r.rss_mib for r in results.runs[BASELINE])
    print(
        "| agent | readings/s | CPU % of a core: median | min | max | vs native "
        "| RSS MiB: median | min | max | vs native |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for device, label in DEVICES.items():
        runs = results.runs[device]
        cpu = [100 * r.cpu_share for r in runs]
        rss = [r.rss_mib for r in runs]
        rate = statistics.median(r.rate for r in runs)
        cpu_ratio = statistics.median(cpu) / (100 * base_cpu)
        print(
            f"| {label} | {rate:.1f} | {statistics.median(cpu):.2f} | {min(cpu):.2f} | {max(cpu):.2f} "
            f"| {cpu_ratio:.1f}x | {statistics.median(rss):.1f} | {min(rss):.1f} | {max(rss):.1f} "
            f"| {statistics.median(rss) / base_rss:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = Results()
    for number in range(1, args.rounds + 1):
        runs = one_round(args.seconds, args.warmup)
        for device, run in runs.items():
            results.runs[device].append(run)
        print(
            f"round {number}: "
            + ", ".join(
                f"{d} {100 * r.cpu_share:.2f} % {r.rss_mib:.1f} MiB {r.rate:.1f}/s" for d, r in runs.items()
            )
        )
    print_table(results)


if __name__ == "__main__":
    main()
