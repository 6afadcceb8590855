"""`pikit status` as a screen of text (red where unhealthy), or as an HTML page."""

from __future__ import annotations

import html
from typing import Any

from pikit.status import Part, Status, stamp

RED, GREEN, BOLD, RESET = "\033[31m", "\033[32m", "\033[1m", "\033[0m"


def _ago(seconds: Any) -> str:
    if seconds is None:
        return "?"
    seconds = float(seconds)
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def describe(kind: str, part: Part) -> str:
    """The facts of one part, on one line."""
    d = part.details
    if kind == "quorum":
        voters = " · ".join(
            f"{v['id']} lag {v['lag']}" + (f" caught up {_ago(v['caught_up_s_ago'])}" if v["lag"] else "")
            for v in d.get("voters", [])
        )
        leader = f"leader {d['leader']} ({d['leader_host']})" if "leader" in d else ""
        return f"{leader}  voters {voters}" + (f"  observers {d['observers']}" if d.get("observers") else "")
    if kind == "broker":
        if not d.get("up"):
            return str(d.get("address", ""))
        if "node_id" not in d:  # the admin API did not answer (a broker hung): the probe's word only
            return f"{d.get('address', '')}  answers on its client port"
        disk = f"  disk {d['disk_used']:.0%}" if d.get("disk_used") is not None else ""
        return (
            f"node {d['node_id']}  {d['address']}  partitions {d.get('partitions', 0)} "
            f"(leads {d.get('leaders', 0)})  URP {d.get('urp', 0)}{disk}"
        )
    if kind == "spark":
        bits = [str(d[k]) for k in ("state",) if k in d]
        if d.get("held_out"):
            bits.append(f"held out of service: {d['held_out']}")
        elif d.get("in_service") is False:
            bits.append("out of service (spark_workers_decommissioned)")
        if "cores" in d:
            bits.append(
                f"cores {d.get('cores_used', '-')}/{d['cores']}"
                if "cores_used" in d
                else f"cores {d['cores']}"
            )
        if "driver" in d:
            standby = ", ".join(d.get("standby", [])) or "none"
            bits.append(f"driver {d['driver']} (standing by: {standby})")
        for q in d.get("queries", []):
            bits.append(
                f"{q['query']}: batch {q['batch']}, {q['records_behind']} records behind, "
                f"last batch {_ago(q['progress_s_ago'])}"
            )
        return "  ".join(bits)
    if kind == "agent":
        if "revoked" in d:
            return f"revoked {d['revoked']}: refused by every broker (playbooks/edge-revoke.yml)"
        if "last_reading_s_ago" not in d:
            bits = [str(d["last_reading"])] if "last_reading" in d else []
        else:
            spool = d["spool"] if d.get("spool") is not None else "?"
            bits = [
                f"last reading {_ago(d['last_reading_s_ago'])}",
                f"spool {spool}",
                f"release {d.get('version') or '?'}",
            ]
        if "certificate_days_left" in d:
            bits.append(f"certificate {d['certificate_days_left']:.0f} days")
        if d.get("forged_records"):
            bits.append(f"its key signed {d['forged_records']} records claiming other devices: stolen?")
        return "  ".join(bits)
    if kind == "connector":
        if "state" not in d:
            return ""
        bits = [d["state"], f"tasks {' '.join(d.get('tasks', [])) or 'none'}"]
        for topic, behind in sorted(d.get("lag", {}).items()):
            oldest = f"oldest {behind['seconds']:.0f} s" if behind["records"] else "caught up"
            bits.append(f"{topic} on {d.get('core', '?')}: {behind['records']} behind, {oldest}")
        return "  ".join(bits)
    if kind == "node":
        return f"{d.get('address', '')}  {d.get('os', '?')}"
    return ""


def text(status: Status, color: bool) -> str:
    def paint(code: str, words: str) -> str:
        return f"{code}{words}{RESET}" if color else words

    problems = status.problems
    verdict = paint(GREEN, "HEALTHY") if not problems else paint(RED, f"{len(problems)} PROBLEMS")
    lines = [paint(BOLD, f"pikit status  {status.site}  {stamp(status.checked_at)}") + f"  {verdict}"]
    sections = {
        "quorum": "Kafka quorum",
        "broker": "Kafka brokers",
        "connector": "Kafka Connect",
        "spark": "Spark",
        "agent": "Edge agents",
        "node": "Nodes (OS release)",
    }
    last = ""
    for kind, part in status.parts():
        if kind != last:
            lines.append(paint(BOLD, sections[kind]))
            last = kind
        mark = paint(GREEN, "ok ") if part.healthy else paint(RED, "BAD")
        lines.append(f"  {mark} {part.name:<28} {describe(kind, part)}")
        for problem in part.problems:
            lines.append(paint(RED, f"        {problem}"))
    return "\n".join(lines)


def page(status: Status) -> str:
    rows = []
    for kind, part in status.parts():
        style = "" if part.healthy else ' class="bad"'
        why = "<br>".join(html.escape(p) for p in part.problems) or "ok"
        rows.append(
            f"<tr{style}><td>{html.escape(kind)}</td><td>{html.escape(part.name)}</td>"
            f"<td>{html.escape(describe(kind, part))}</td><td>{why}</td></tr>"
        )
    verdict = "healthy" if not status.problems else f"{len(status.problems)} problems"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>pikit status: {verdict}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }}
tr.bad td {{ background: #fdd; color: #900; }}
</style></head><body>
<h1>pikit status: {verdict}</h1>
<p>{html.escape(status.site)}, checked {stamp(status.checked_at)}</p>
<table><tr><th>part</th><th>name</th><th>state</th><th>problems</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
