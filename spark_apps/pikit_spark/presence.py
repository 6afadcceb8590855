"""Silent devices: one alert when a device has sent no reading for `silent_after` seconds, and one
"back" alert when its readings come again; never one per batch in between.

Decided on the driver after each micro-batch, from the batch's own timestamp (Spark's offset log,
the same on a replay) and the state version before the batch (pikit_spark/state.py): a batch
replayed after a crash raises the same alerts, which the exactly-once sink then skips. Time is
processing time: a device draining its spool after an outage is "back" when its readings arrive,
whatever their own timestamps say. A batch runs only when the readings topic has new records,
so silence is noticed at the next batch of any device: with every device silent, the brokers' or
the pipeline's own health says more than a per-device alert would.
"""

from __future__ import annotations

from typing import Any

from pikit_spark.state import TableRow

PRESENCE_SCHEMA = "device string, last_seen double, silent boolean"
SENSOR, METRIC = "agent", "presence"


def _alert(device: str, gap: float, at: float, reason: str) -> dict[str, Any]:
    # The alerts topic's columns (pikit_spark/anomalies.py); value is the silence in seconds.
    return {
        "device": device,
        "sensor": SENSOR,
        "metric": METRIC,
        "seq": None,
        "value": round(gap, 1),
        "unit": "s",
        "ts": at,
        "reason": reason,
        "baseline_mean": None,
        "baseline_stddev": None,
    }


def presence(
    seen: frozenset[str] | set[str], processed_at: float, state: list[TableRow], silent_after: float
) -> tuple[list[dict[str, Any]], list[TableRow]]:
    """The devices with readings in this batch, the batch's time and the presence state before it
    -> the silent and back alerts, and the state after it (sorted by device)."""
    known = {device: (float(last_seen), bool(silent)) for device, last_seen, silent in state}
    alerts = []
    for device in sorted(set(known) | seen):
        last_seen, silent = known.get(device, (processed_at, False))
        gap = processed_at - last_seen
        if device in seen:
            if silent:
                alerts.append(_alert(device, gap, processed_at, f"back: readings again after {gap:.0f} s"))
            known[device] = (processed_at, False)
        elif not silent and gap >= silent_after:
            alerts.append(_alert(device, gap, processed_at, f"silent: no reading for {gap:.0f} s"))
            known[device] = (last_seen, True)
    return alerts, [(device, *known[device]) for device in sorted(known)]
