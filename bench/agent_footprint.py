"""The agent's steady memory and CPU at 10 readings/s (a busy sensor node), against a local broker.

.venv/bin/python -m bench.agent_footprint [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pikit.localkafka import REPO, LocalBroker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = LocalBroker(work / "kafka")
        broker.start()
        config = work / "agent.toml"
        config.write_text(
            f"""device_id = "footprint"
require_clock_sync = false
[kafka]
bootstrap_servers = ["{broker.address}"]
[spool]
directory = "{work / "spool"}"
[metrics]
listen = ""
[[sensors]]
type = "simulated"
interval = 0.2
metrics = ["temperature", "humidity"]
"""
        )
        env = {**os.environ, "PYTHONPATH": str(REPO / "edge_agent")}
        agent = subprocess.Popen(
            [sys.executable, "-m", "edge_agent", "run", "--config", str(config)],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        try:
            time.sleep(10)  # warm-up: connections, first batches
            tick = os.sysconf("SC_CLK_TCK")

            def cpu_seconds() -> float:
                fields = Path(f"/proc/{agent.pid}/stat").read_text().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / tick

            before, started = cpu_seconds(), time.monotonic()
            time.sleep(args.seconds)
            cpu = (cpu_seconds() - before) / (time.monotonic() - started)
            status = Path(f"/proc/{agent.pid}/status").read_text()
            rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
        finally:
            agent.terminate()
            agent.wait(timeout=30)
            broker.stop()
    print("| readings/s | RSS | peak RSS | CPU (one core) |\n|---:|---:|---:|---:|")
    print(f"| 10 | {rss / 1024:.1f} MiB | {hwm / 1024:.1f} MiB | {100 * cpu:.2f} % |")


if __name__ == "__main__":
    main()
