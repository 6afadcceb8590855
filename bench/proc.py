"""What the kernel says of a process the bench watches."""

from __future__ import annotations

import os
from pathlib import Path


def status_kib(pid: int, key: str) -> int:
    """A size field of /proc/<pid>/status in KiB (VmRSS, VmHWM, ...); 0 when the kernel lacks it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    """The CPU seconds (user and system) a process has used, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
