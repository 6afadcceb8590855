"""The edge agent against a real broker: outages and kill -9 lose no reading.

The agent runs as its own process with a fast simulated sensor. The broker is
stopped for a while and started again; later the agent is killed with SIGKILL and
restarted; finally it is stopped with SIGTERM. Every reading it took must then be
in Kafka: sequence numbers 0..N per device with no gap. Duplicates can only come
from the one batch in flight when the agent was killed (acknowledged by Kafka but
not yet marked in the spool); consumers drop them by (device, seq).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

from edge_agent.sender import RECORDS_PER_ROUND, ROUNDS_IN_FLIGHT
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic
from pikit_contract import signing
from pikit_contract.readings import decode_batch
from pikit_testkit.polling import wait_for

from pikit import REPO
from tests.integration.conftest import LocalBroker, free_port

TOPIC = "it-agent-readings"
PER_RECORD = 50
SIGNING_KEY = signing.device_key(b"integration site", "edge-it")


def write_config(tmp_path: Path, broker: str, metrics_port: int) -> Path:
    config = tmp_path / "agent.toml"
    key_file = tmp_path / "signing.key"
    key_file.write_text(SIGNING_KEY.hex() + "\n")
    config.write_text(
        f"""
device_id = "edge-it"
require_clock_sync = false  # this host's clock may not be NTP-disciplined
[kafka]
bootstrap_servers = ["{broker}"]
topic = "{TOPIC}"
readings_per_record = {PER_RECORD}
linger_ms = 20
signing_key_file = "{key_file}"
[spool]
directory = "{tmp_path / "spool"}"
fsync = "interval"
[metrics]
listen = "127.0.0.1:{metrics_port}"
[[sensors]]
type = "simulated"
interval = 0.01
seed = 11
metrics = ["temperature", "humidity"]
"""
    )
    return config


def start_agent(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "edge_agent")}
    return subprocess.Popen(
        [sys.executable, "-m", "edge_agent", "run", "--config", str(config)],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env=env,
    )


def metric(port: int, name: str) -> float:
    for _ in range(50):
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            match = re.search(rf"^{name} (\S+)$", text, re.M)
            assert match, text
            return float(match.group(1))
        except OSError:
            time.sleep(0.2)
    raise AssertionError("metrics endpoint not answering")


def test_outage_and_kill_9_lose_no_reading(own_broker: LocalBroker, tmp_path: Path) -> None:
    admin = KafkaAdminClient(bootstrap_servers=own_broker.address)
    admin.create_topics([NewTopic(TOPIC, 3, 1)])
    admin.close()
    port = free_port()
    config = write_config(tmp_path, own_broker.address, port)
    log = tmp_path / "agent.log"

    agent = start_agent(config, log)
    wait_for("first readings sent", lambda: metric(port, "edge_agent_readings_sent_total") > 200, 60, 0.5)

    own_broker.stop()
    time.sleep(6)
    depth_in_outage = metric(port, "edge_agent_spool_depth")
    assert depth_in_outage > 500, "readings pile up in the spool while the broker is away"
    own_broker.start()
    wait_for(
        "the spool to drain after the outage", lambda: metric(port, "edge_agent_spool_depth") < 200, 90, 0.5
    )
    errors_seen = metric(port, "edge_agent_send_errors_total")

    time.sleep(1.5)
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    agent = start_agent(config, log)
    wait_for(
        "sending after the restart", lambda: metric(port, "edge_agent_readings_sent_total") > 200, 60, 0.5
    )
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=30) == 0, log.read_text()[-2000:]
    assert "stopped: 0 readings left in the spool" in log.read_text()

    consumer = KafkaConsumer(
        TOPIC, bootstrap_servers=own_broker.address, auto_offset_reset="earliest", consumer_timeout_ms=8000
    )
    records = list(consumer)
    consumer.close()
    seqs = Counter(r.seq for record in records for r in decode_batch(record.value))
    # Every record arrives signed by this device's key, headers intact through the broker.
    verdicts = Counter(signing.verdict(r.value, r.headers, {"edge-it": SIGNING_KEY}) for r in records)
    assert verdicts == {(None, "edge-it"): len(records)}, verdicts
    highest = max(seqs)
    missing = sorted(set(range(highest + 1)) - set(seqs))
    duplicates = sum(n - 1 for n in seqs.values())
    print(
        f"agent: {highest + 1} readings, spool depth {depth_in_outage:.0f} during the outage, "
        f"{errors_seen:.0f} send errors, {duplicates} duplicates after kill -9"
    )
    print("\n".join(line for line in log.read_text().splitlines() if "send failed" in line))
    assert not missing, f"{len(missing)} readings lost, e.g. {missing[:10]}"
    assert duplicates <= PER_RECORD * RECORDS_PER_ROUND * ROUNDS_IN_FLIGHT, (
        "only rounds in flight at the kill repeat"
    )
