"""What the kernel says of a process the bench watches."""

from __future__ import annotations

from pathlib import Path


def status_kib(pid: int, key: str) -> int:
    """A size field of /proc/<pid>/status in KiB (VmRSS, VmHWM, ...); 0 when the kernel lacks it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0
