"""The demo's picture of the pipeline: readings and their window aggregates over time (PNG + HTML)."""

from __future__ import annotations

import base64
import html
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

Series = dict[tuple[str, str], list[tuple[float, float]]]  # (device, metric) -> [(ts, value)]


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def draw(readings: Series, aggregates: list[dict[str, Any]], alerts: list[dict[str, Any]], png: Path) -> None:
    metrics = sorted({metric for _, metric in readings} | {a["metric"] for a in aggregates})
    fig, axes = plt.subplots(
        len(metrics) or 1, 1, figsize=(11, 3.2 * max(len(metrics), 1)), sharex=True, squeeze=False
    )
    windows: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for agg in aggregates:
        windows[(agg["device"], agg["metric"])].append(agg)
    for ax, metric in zip(axes[:, 0], metrics, strict=False):
        devices = sorted({d for d, m in readings if m == metric} | {d for d, m in windows if m == metric})
        for index, device in enumerate(devices):
            colour = f"C{index}"
            points = sorted(readings.get((device, metric), []))
            if points:
                times, values = [_when(t) for t, _ in points], [v for _, v in points]
                ax.plot(times, values, color=colour, lw=0.6, alpha=0.5, label=f"{device} readings")
            spans = sorted(windows.get((device, metric), []), key=lambda a: a["window_start"])
            for agg in spans:
                start, end = _when(agg["window_start"]), _when(agg["window_end"])
                ax.fill_between([start, end], agg["min"], agg["max"], color=colour, alpha=0.12, lw=0)
                ax.plot([start, end], [agg["mean"]] * 2, color=colour, lw=2.2)
            if spans:
                ax.plot([], [], color=colour, lw=2.2, label=f"{device} window mean (band: min-max)")
        for alert in alerts:
            if alert["metric"] == metric:
                ax.plot(_when(alert["ts"]), alert["value"], "rx", ms=7)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", ncol=2)
    axes[0, 0].set_title("Readings (thin), Spark window aggregates (thick + band), alerts (x)")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def page(png: Path, aggregates: list[dict[str, Any]], alerts: list[dict[str, Any]], out: Path) -> None:
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for agg in sorted(aggregates, key=lambda a: a["window_start"]):
        latest[(agg["device"], agg["sensor"], agg["metric"])] = agg
    rows = "".join(
        f"<tr><td>{html.escape(d)}</td><td>{html.escape(s)}</td><td>{html.escape(m)}</td>"
        f"<td>{_when(a['window_start']):%H:%M}</td><td>{a['count']}</td><td>{a['min']:.3f}</td>"
        f"<td>{a['mean']:.3f}</td><td>{a['max']:.3f}</td><td>{a['stddev']:.3f}</td></tr>"
        for (d, s, m), a in sorted(latest.items())
    )
    alert_rows = "".join(
        f"<tr><td>{_when(a['ts']):%H:%M:%S}</td><td>{html.escape(a['device'])}</td>"
        f"<td>{html.escape(a['sensor'])}.{html.escape(a['metric'])}</td><td>{a['value']:.3f}</td>"
        f"<td>{html.escape(a['reason'])}</td></tr>"
        for a in alerts[-50:]
    )
    image = base64.b64encode(png.read_bytes()).decode()
    out.write_text(
        f"""<!doctype html><meta charset="utf-8"><title>pikit pipeline</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px}}</style>
<h1>Sensor pipeline in the lab</h1><p>Generated {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC.</p>
<img src="data:image/png;base64,{image}" style="max-width:100%">
<h2>Latest window per device and metric</h2>
<table><tr><th>device</th><th>sensor</th><th>metric</th><th>window</th><th>count</th><th>min</th><th>mean</th>
<th>max</th><th>stddev</th></tr>{rows}</table>
<h2>Alerts ({len(alerts)}; the latest 50)</h2>
<table><tr><th>time</th><th>device</th><th>sensor.metric</th><th>value</th><th>reason</th></tr>{alert_rows}</table>
"""
    )
