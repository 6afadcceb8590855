#!/usr/bin/env python3
"""How far a site's mirror on its core is behind the site (roles/connect, connect_mirror), for the
node exporter's textfile collector, and for `pikit status`, which imports it as
`ansible_collections.pikit.cluster.plugins.module_utils.mirror_lag`: one probe, on the workers and
on the controller.

The mirror's progress is what it committed: its source offsets, which Connect keeps on the core
and serves at GET /connectors/<site>.mirror/offsets. The site's side is each partition's last
stable offset, read_committed. Per mirrored topic:
- pikit_mirror_lag_records: the offsets from the oldest committed record not yet copied to the
  last stable offset (a transaction's commit marker counts as one);
- pikit_mirror_lag_seconds: that record's age, 0 when every committed record is copied;
- pikit_mirror_lost_records: the offsets the site deleted (its retention, its disk guard) before
  the mirror copied them: an outage longer than the site keeps its records.
When the core cannot be reached, neither can the offsets: the last ones read stand (kept in the
state file), so the lag only grows while the uplink is down, and
pikit_mirror_offsets_age_seconds says how old they are.

Installed as /usr/local/sbin/pikit-mirror-lag, run as `pikit-mirror-lag <config.json>`, the
config written by the connect role: rest, connector, site, core, topics, bootstrap, cafile,
certfile, state, out.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition

Position = dict[tuple[str, int], int]


def committed(rest: str, connector: str, timeout: float = 10.0) -> Position:
    """The next offset the mirror copies in each source partition, from what it committed."""
    url = f"{rest}/connectors/{urllib.parse.quote(connector, safe='')}/offsets"
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = json.load(response)
    out: Position = {}
    for entry in body.get("offsets", []):
        partition, offset = entry.get("partition") or {}, entry.get("offset") or {}
        if {"topic", "partition"} <= partition.keys() and "offset" in offset:
            # MirrorMaker keeps the offset of the last record it copied.
            out[(str(partition["topic"]), int(partition["partition"]))] = int(offset["offset"]) + 1
    return out


def lag(client: dict[str, Any], positions: Position, topics: list[str], now: float) -> dict[str, Any]:
    """{topic: {records, seconds, lost}}: how far the copy is behind the site's committed records, and
    how many the site deleted (its retention, its disk guard) before the copy had them."""
    consumer = KafkaConsumer(**client, enable_auto_commit=False, isolation_level="read_committed")
    try:
        parts = [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t) or [])]
        ends = consumer.end_offsets(parts) if parts else {}
        begins = consumer.beginning_offsets(parts) if parts else {}
        start = {tp: max(positions.get((tp.topic, tp.partition), 0), begins[tp]) for tp in parts}
        behind = [tp for tp in parts if ends[tp] > start[tp]]
        oldest: dict[Any, Any] = {}
        if behind:
            consumer.assign(behind)
            for tp in behind:
                consumer.seek(tp, start[tp])
            deadline = time.monotonic() + 15
            # Past the copy's position there may be markers and aborted records only: a partition
            # whose poll reaches its end with no committed record is caught up.
            while time.monotonic() < deadline and len(oldest) < len(behind):
                for tp, records in consumer.poll(timeout_ms=500).items():
                    if records and tp not in oldest:
                        oldest[tp] = records[0]
                        consumer.pause(tp)
                waiting = [tp for tp in behind if tp not in oldest]
                if waiting and all(consumer.position(tp) >= ends[tp] for tp in waiting):
                    break
        out = {topic: {"records": 0, "seconds": 0.0, "lost": 0} for topic in topics}
        for tp in parts:
            copied = positions.get((tp.topic, tp.partition))
            if copied is not None and copied < begins[tp]:
                out[tp.topic]["lost"] += begins[tp] - copied
        for tp, record in oldest.items():
            out[tp.topic]["records"] += ends[tp] - record.offset
            age = max(0.0, now - record.timestamp / 1000)
            out[tp.topic]["seconds"] = max(out[tp.topic]["seconds"], age)
        return out
    finally:
        consumer.close()


def measure(config: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """The lag per topic, and the age of the offsets it was measured from (0: read just now)."""
    now = time.time() if now is None else now
    state = Path(config["state"])
    try:
        positions = committed(config["rest"], config["connector"])
        state.write_text(json.dumps({"read": now, "offsets": [[t, p, o] for (t, p), o in positions.items()]}))
        age = 0.0
    except (OSError, ValueError):
        kept = json.loads(state.read_text()) if state.exists() else {"read": None, "offsets": []}
        positions = {(t, int(p)): int(o) for t, p, o in kept["offsets"]}
        age = now - kept["read"] if kept["read"] else float("inf")
    client = {
        "bootstrap_servers": config["bootstrap"],
        "security_protocol": "SSL",
        "ssl_cafile": config["cafile"],
        "ssl_certfile": config["certfile"],
    }
    return {"topics": lag(client, positions, config["topics"], now), "offsets_age": age, "at": now}


# The per-topic gauges: (metric, the measure's key, help).
GAUGES = [
    ("pikit_mirror_lag_records", "records", "Offsets of the site's committed records not yet on the core."),
    ("pikit_mirror_lag_seconds", "seconds", "Age of the site's oldest committed record not yet on the core."),
    ("pikit_mirror_lost_records", "lost", "Offsets the site deleted before the core had them."),
]


def render(config: dict[str, Any], measured: dict[str, Any]) -> str:
    site, core = config["site"], config["core"]
    lines = []
    for metric, key, text in GAUGES:
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} gauge"]
        for topic, lag_of in sorted(measured["topics"].items()):
            lines.append(f'{metric}{{site="{site}",core="{core}",topic="{topic}"}} {lag_of[key]:g}')
    age = measured["offsets_age"]
    lines += [
        "# HELP pikit_mirror_offsets_age_seconds Age of the mirror's offsets the lag was measured from.",
        "# TYPE pikit_mirror_offsets_age_seconds gauge",
        f'pikit_mirror_offsets_age_seconds{{site="{site}",core="{core}"}} '
        + ("+Inf" if age == float("inf") else f"{age:.3f}"),
        "# HELP pikit_mirror_lag_timestamp_seconds When the mirror's lag was last measured.",
        "# TYPE pikit_mirror_lag_timestamp_seconds gauge",
        f'pikit_mirror_lag_timestamp_seconds{{site="{site}",core="{core}"}} {measured["at"]:.3f}',
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[1]).read_text())
    text = render(config, measure(config))
    out = Path(config["out"])
    tmp = out.with_name(f"{out.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(0o644)  # for the node exporter's user, whatever the unit's UMask=
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
