"""The agent's memory and CPU as deployed: mTLS, metrics endpoint on and scraped, a full spool to drain.

One agent process with a simulated sensor (2 metrics every 0.2 s = 10 readings/s),
producing over mTLS to a local broker, its Prometheus endpoint scraped every 5 s. It
starts with a backlog already spooled (an outage's worth, inside the default 64 MiB
spool), so the first phase is the drain after an outage; the second is the steady
state after it. RSS is sampled from /proc every 0.1 s; CPU from /proc/<pid>/stat.

    .venv/bin/python -m bench.agent_footprint [--backlog 400000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from edge_agent.config import SpoolConfig
from edge_agent.spool import Spool
from pikit_testkit.broker import LocalBroker, free_port

from bench.agent_drain import make_tls, readings
from bench.proc import cpu_s, status_kib
from pikit import REPO

SCRAPE_EVERY = 5.0
SAMPLE_EVERY = 0.1


@dataclass
class Phase:
    seconds: float
    cpu: float  # share of one core
    rss_kib: list[int]

    def row(self, name: str) -> str:
        mean = sum(self.rss_kib) / len(self.rss_kib) / 1024
        return (
            f"| {name} | {self.seconds:.1f} s | {mean:.1f} MiB | {max(self.rss_kib) / 1024:.1f} MiB "
            f"| {100 * self.cpu:.2f} % |"
        )


class Agent:
    def __init__(self, pid: int, metrics: str) -> None:
        self.pid, self.metrics = pid, metrics
        self.scraped = 0.0

    def cpu_seconds(self) -> float:
        return cpu_s(self.pid)

    def rss_kib(self) -> int:
        return status_kib(self.pid, "VmRSS")

    def scrape(self) -> dict[str, float]:
        self.scraped = time.monotonic()
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=5) as response:
            text = response.read().decode()
        return {
            line.split()[0]: float(line.split()[1])
            for line in text.splitlines()
            if line and not line.startswith("#")
        }

    def measure(self, until: float | None = None, drained: bool = False) -> Phase:
        """Sample until the deadline, or (drained=True) until the scraped spool depth is 0."""
        started, cpu0, rss = time.monotonic(), self.cpu_seconds(), []
        while True:
            rss.append(self.rss_kib())
            now = time.monotonic()
            if now - self.scraped >= SCRAPE_EVERY or drained:
                depth = self.scrape().get("edge_agent_spool_depth", -1)
                if drained and depth == 0:
                    break
            if until is not None and now >= until:
                break
            time.sleep(SAMPLE_EVERY)
        seconds = time.monotonic() - started
        return Phase(seconds, (self.cpu_seconds() - cpu0) / seconds, rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=400_000, help="readings spooled before the start")
    parser.add_argument("--seconds", type=int, default=60, help="the steady phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tls = make_tls(work)
        broker = LocalBroker(work / "kafka", tls=(tls["bundle"], tls["ca"]))
        broker.start()
        spool_dir = work / "spool"
        spool = Spool(spool_dir, max_bytes=SpoolConfig.max_bytes, segment_bytes=4 << 20, fsync="never")
        for i, body in enumerate(readings(args.backlog)):
            assert spool.append(i, body), "the backlog must fit the default spool"
        assert spool.depth == args.backlog
        spool.close()
        metrics = f"127.0.0.1:{free_port()}"
        config = work / "agent.toml"
        config.write_text(
            f"""device_id = "bench"
require_clock_sync = false
[kafka]
bootstrap_servers = ["{broker.address}"]
ca_file = "{tls["ca"]}"
cert_file = "{tls["bundle"]}"
[spool]
directory = "{spool_dir}"
[metrics]
listen = "{metrics}"
[[sensors]]
type = "simulated"
interval = 0.2
metrics = ["temperature", "humidity"]
"""
        )
        env = {**os.environ, "PYTHONPATH": str(REPO / "edge_agent")}
        process = subprocess.Popen(
            [sys.executable, "-m", "edge_agent", "run", "--config", str(config)],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        agent = Agent(process.pid, metrics)
        try:
            deadline = time.monotonic() + 30
            while True:  # the endpoint is up once the agent has started
                try:
                    agent.scrape()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the agent's metrics endpoint never came up"
                    time.sleep(0.05)
            draining = agent.measure(drained=True)
            agent.measure(until=time.monotonic() + 10)  # settle after the drain
            steady = agent.measure(until=time.monotonic() + args.seconds)
        finally:
            process.terminate()
            process.wait(timeout=30)
            broker.stop()
    print(
        f"\nagent over mTLS, metrics scraped every {SCRAPE_EVERY:.0f} s, 10 readings/s sampled; "
        f"{args.backlog:,} readings spooled before the start\n"
    )
    print("| phase | duration | mean RSS | peak RSS | CPU (one core) |\n|---|---:|---:|---:|---:|")
    print(draining.row(f"draining the backlog ({args.backlog / draining.seconds:,.0f} readings/s)"))
    print(steady.row("steady, 10 readings/s"))


if __name__ == "__main__":
    main()
