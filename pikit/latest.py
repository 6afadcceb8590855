"""`pikit latest [DEVICE]`: what each device reads now, from the compacted latest topic.

sensor_aggregates writes the newest closed window of each device x sensor x metric to
`pikit_latest_topic`, keyed `device/sensor/metric`, in the same Kafka transaction as the
aggregates; compaction keeps the last record of each key. So the answer is one small topic read
to its end (read_committed), not a scan of the aggregates' history.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pikit.site import Site, SiteError
from pikit.topic import answering_brokers, mtls_client, read_to_end

COLUMNS = ("device", "sensor", "metric", "window (UTC)", "count", "min", "mean", "max", "unit")


@dataclass
class Latest:
    """The newest closed window of each series asked for, and how long the topic took to read."""

    windows: list[dict[str, Any]]
    read_s: float


def newest(records: list[Any], device: str | None = None) -> list[dict[str, Any]]:
    """The last value of each key, in topic order (what compaction keeps), for one device or all;
    a record without a value (a tombstone) removes its key."""
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        key = (record.key or b"").decode()
        if device is not None and key.split("/", 1)[0] != device:
            continue
        if record.value is None:
            found.pop(key, None)
        else:
            found[key] = json.loads(record.value)
    return [found[key] for key in sorted(found)]


def read(site: Site, device: str | None = None, pki: Path | None = None) -> Latest:
    """The latest topic of the site's cluster, read to its end with the controller's admin
    identity."""
    pki = pki or site.state_dir / "pki"
    brokers = answering_brokers(site, pki)
    if not brokers:
        raise SiteError("no broker of group kafka_broker answers on its client port")
    client = mtls_client(brokers, pki)
    start = time.monotonic()
    records = read_to_end(str(site.setting("pikit_latest_topic")), timeout=30, **client)
    return Latest(newest(records, device), time.monotonic() - start)


def _window(window: dict[str, Any]) -> str:
    start = datetime.fromtimestamp(window["window_start"], UTC)
    end = datetime.fromtimestamp(window["window_end"], UTC)
    return f"{start:%Y-%m-%d %H:%M:%S}-{end:%H:%M:%S}"


def table(windows: list[dict[str, Any]]) -> str:
    """One line per series, in columns."""
    rows = [
        (
            w["device"],
            w["sensor"],
            w["metric"],
            _window(w),
            str(w["count"]),
            f"{w['min']:g}",
            f"{w['mean']:g}",
            f"{w['max']:g}",
            w.get("unit") or "",
        )
        for w in windows
    ]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [COLUMNS, *rows]
    )
