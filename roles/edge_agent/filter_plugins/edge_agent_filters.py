"""Filters of the edge_agent role: reading the agent's metrics, which releases to keep, and the
device nodes its sensors open (the agent's own declaration, edge_agent.sensors)."""

from __future__ import annotations

import re
from typing import Any

from edge_agent.sensors import device_nodes

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def edge_agent_metrics(text: str) -> dict[str, Any]:
    """The agent's Prometheus text as {name: value}, and {name: {label value: value}} for
    a labelled family (the agent labels each family by one label at most)."""
    samples: dict[str, Any] = {}
    for line in (text or "").splitlines():
        match = _SAMPLE.match(line)
        if line.startswith("#") or not match:
            continue
        value = float(match["value"])
        labels = _LABEL.findall(match["labels"] or "")
        if labels:
            samples.setdefault(match["name"], {})[labels[0][1]] = value
        else:
            samples[match["name"]] = value
    return samples


def edge_agent_release_health(metrics: dict[str, Any], release: str) -> str:
    """Why the running agent is not yet a healthy `release`; empty when it is: the release
    running, and at least one reading acknowledged by Kafka since this process started."""
    running = sorted(metrics.get("edge_agent_build_info") or {})
    if not running:
        return "the agent's metrics do not name a release (an agent older than the roll-out check)"
    if running != [release]:
        return f"the agent runs release {', '.join(running)}, not {release}"
    if not metrics.get("edge_agent_readings_sent_total"):
        return f"release {release} runs, but Kafka has acknowledged no reading since it started"
    return ""


def edge_agent_metrics_health(page: dict[str, Any], release: str) -> str:
    """edge_agent_release_health of a registered `uri` result for the metrics page; empty when
    the metrics are off (the task skipped), a reason when the page could not be read."""
    if page.get("skipped"):
        return ""
    if page.get("status") != 200:
        why = page.get("msg") or page.get("status")
        return f"the agent's metrics are not reachable ({why}): it is not running"
    return edge_agent_release_health(edge_agent_metrics(page.get("content", "")), release)


def edge_agent_started_ms(page: dict[str, Any], otherwise: float) -> int:
    """When the agent process started (ms), from a registered metrics page; `otherwise` (seconds)."""
    started = edge_agent_metrics(page.get("content", "")).get("edge_agent_start_time_seconds")
    return int(1000 * (started if started else otherwise))


def edge_agent_schemas_read(page: str) -> list[int]:
    """The reading contract's versions a Spark app's metrics page says its code reads; [1] for a
    page without them (the apps read version 1 alone until they said so)."""
    found = sorted(
        int(labels["schema"])
        for match in map(_SAMPLE.match, (page or "").splitlines())
        if match and match["name"] == "pikit_app_reading_schema"
        for labels in [dict(_LABEL.findall(match["labels"] or ""))]
        if "schema" in labels and float(match["value"]) == 1
    )
    return found or [1]


def edge_agent_movers(hostvars: Any, hosts: list[str], release: str) -> list[str]:
    """The hosts about to change release: their `current` link (the registered stat
    `_edge_agent_running`) points at another release than `release`, or at none yet."""
    moving = []
    for host in hosts:
        stat = (hostvars[host].get("_edge_agent_running") or {}).get("stat") or {}
        if (stat.get("lnk_target") or "").rstrip("/").rsplit("/", 1)[-1] != release:
            moving.append(host)
    return moving


def edge_agent_contract_refusal(pages: list[dict[str, Any]], release: str, writes: int) -> str:
    """Why agent `release`, which writes version `writes` of the reading contract, must not roll out
    yet; empty when every streaming app's metrics page (registered `uri` results) answers and
    reads that version. Readers move first: an app that cannot read it would dead-letter every
    reading of every upgraded device."""
    problems = []
    for page in pages:
        url = page.get("url") or page.get("item") or "?"
        if page.get("status") != 200:
            problems.append(f"the app at {url} does not answer ({page.get('msg') or page.get('status')})")
            continue
        reads = edge_agent_schemas_read(page.get("content", ""))
        if writes not in reads:
            problems.append(f"the app at {url} reads version {', '.join(map(str, reads))}")
    if not problems:
        return ""
    return (
        f"agent release {release} writes version {writes} of the reading contract, but "
        + "; ".join(problems)
        + ". Apps first, then agents: submit the apps of this kit (playbooks/site.yml submits them before "
        "the agents, or playbooks/submit.yml -e app=<app> for each of spark_site_apps), then roll the "
        "release out again. No device was changed."
    )


def edge_agent_releases_to_prune(found: list[str], keep: list[str]) -> list[str]:
    """Release directories (paths) whose name is none of `keep` (current and previous release)."""
    return sorted(path for path in found if path.rstrip("/").rsplit("/", 1)[-1] not in keep)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "edge_agent_metrics": edge_agent_metrics,
            "edge_agent_release_health": edge_agent_release_health,
            "edge_agent_metrics_health": edge_agent_metrics_health,
            "edge_agent_started_ms": edge_agent_started_ms,
            "edge_agent_releases_to_prune": edge_agent_releases_to_prune,
            "edge_agent_contract_refusal": edge_agent_contract_refusal,
            "edge_agent_movers": edge_agent_movers,
            "edge_agent_device_nodes": device_nodes,
        }
