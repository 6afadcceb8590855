#!/usr/bin/python
"""Wait until a device's records carrying a given agent release reach the readings topic.

Runs on the controller (kafka-python, a reader's mTLS identity), as kafka_admin does: a
roll-out counts a canary healthy only when Kafka holds what its new release sent.
"""

from __future__ import annotations

import time
from typing import Any

DOCUMENTATION = r"""
module: agent_release_seen
short_description: Wait for a device's records from a given agent release in a topic
description:
  - Reads I(topic) from the records written at or after I(since_ms) up to the end, looking for one
    keyed by I(device) whose I(header) is I(release); with I(wait_timeout) it keeps reading until one
    arrives. Read-only; it never changes anything.
options:
  bootstrap_servers: {type: list, elements: str, required: true, description: host:port of brokers.}
  ssl_cafile: {type: path, required: true, description: CA certificate (PEM).}
  ssl_certfile: {type: path, required: true, description: Client key and certificate (one PEM bundle).}
  topic: {type: str, required: true, description: The readings topic.}
  device: {type: str, required: true, description: The record key (the device id).}
  release: {type: str, required: true, description: The agent release the record must name.}
  header: {type: str, default: pikit-agent, description: The header naming the release (contract.py).}
  since_ms: {type: int, required: true, description: Look only at records written at or after this time (ms).}
  wait_timeout: {type: int, default: 0, description: Seconds to wait for such a record (0 looks once).}
author: pikit
"""

RETURN = r"""
seen: {description: Whether such a record was found, type: bool, returned: always}
record: {description: "Where it was, {partition, offset, timestamp_ms}", type: dict, returned: when seen}
scanned: {description: Records read, type: int, returned: always}
"""

try:
    from kafka import KafkaConsumer, TopicPartition

    HAS_KAFKA = True
except ImportError:
    HAS_KAFKA = False


def matches(record: Any, device: str, header: str, release: str) -> bool:
    if record.key != device.encode():
        return False
    return any(name == header and bytes(value) == release.encode() for name, value in record.headers or ())


def find(
    consumer: Any, topic: str, device: str, header: str, release: str, since_ms: int, deadline: float
) -> dict[str, Any]:
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    if not partitions:
        raise LookupError(f"topic {topic} not found")
    consumer.assign(partitions)
    starts = consumer.offsets_for_times({tp: since_ms for tp in partitions})
    ends = consumer.end_offsets(partitions)
    for tp in partitions:
        found = starts.get(tp)
        consumer.seek(tp, found.offset if found is not None else ends[tp])
    scanned = 0
    while True:
        for records in consumer.poll(timeout_ms=1000, max_records=2000).values():
            for record in records:
                scanned += 1
                if record.timestamp >= since_ms and matches(record, device, header, release):
                    where = {
                        "partition": record.partition,
                        "offset": record.offset,
                        "timestamp_ms": record.timestamp,
                    }
                    return {"seen": True, "record": where, "scanned": scanned}
        if time.monotonic() >= deadline:
            return {"seen": False, "scanned": scanned}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "bootstrap_servers": {"type": "list", "elements": "str", "required": True},
            "ssl_cafile": {"type": "path", "required": True},
            "ssl_certfile": {"type": "path", "required": True},
            "topic": {"type": "str", "required": True},
            "device": {"type": "str", "required": True},
            "release": {"type": "str", "required": True},
            "header": {"type": "str", "default": "pikit-agent"},
            "since_ms": {"type": "int", "required": True},
            "wait_timeout": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    if not HAS_KAFKA:
        module.fail_json(msg="kafka-python is needed on the controller (the kit's venv has it)")
    p = module.params
    consumer = KafkaConsumer(
        bootstrap_servers=p["bootstrap_servers"],
        security_protocol="SSL",
        ssl_cafile=p["ssl_cafile"],
        ssl_certfile=p["ssl_certfile"],
        enable_auto_commit=False,
        client_id="pikit-rollout",
    )
    try:
        result = find(
            consumer,
            p["topic"],
            p["device"],
            p["header"],
            p["release"],
            p["since_ms"],
            time.monotonic() + p["wait_timeout"],
        )
    except Exception as exc:  # a broker error is a failed check, said plainly
        module.fail_json(msg=f"reading {p['topic']}: {exc}", seen=False, scanned=0)
    finally:
        consumer.close()
    if not result["seen"]:
        module.fail_json(
            msg=(
                f"no record from {p['device']} naming release {p['release']} in {p['topic']} "
                f"within {p['wait_timeout']}s ({result['scanned']} records read)"
            ),
            **result,
        )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
