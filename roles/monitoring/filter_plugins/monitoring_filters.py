"""Filters of the monitoring role: Prometheus's scrape jobs from the inventory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LOOPBACK = ("127.", "localhost", "::1", "[::1]")
ANY = ("", "0.0.0.0", "::", "[::]")


def _target(job: Mapping[str, Any], host: str, hostvars: Mapping[str, Any], host_address: str) -> list[str]:
    """`address:port` of each endpoint `job` scrapes on `host`; [] where it serves none that
    another node can reach (port 0, or a listen address on loopback)."""
    facts = hostvars[host]
    if job.get("listen_var"):
        listen = str(facts.get(job["listen_var"], job.get("listen", "")))
        if not listen:
            return []
        address, _, port = listen.rpartition(":")
        if address.startswith(LOOPBACK):
            return []
        return [f"{host_address if address in ANY else address}:{int(port)}"]
    ports = job.get("ports") or [facts.get(job.get("port_var") or "", job["port"])]
    return [f"{host_address}:{int(port)}" for port in ports if int(port)]


def monitoring_scrape_configs(
    jobs: list[Mapping[str, Any]],
    groups: Mapping[str, list[str]],
    hostvars: Mapping[str, Any],
    addresses: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Prometheus `scrape_configs` for `jobs` ({name, groups, port | ports | port_var | listen_var,
    path}): one static config per host at its address (`addresses`: host -> pikit_address),
    labelled with its inventory name (`host`), so that alerts name a host as the inventory does.
    A job with no target on any host is left out."""
    configs = []
    for job in jobs:
        hosts = sorted({h for group in job["groups"] for h in groups.get(group, [])})
        statics = []
        for host in hosts:
            targets = _target(job, host, hostvars, addresses[host])
            if targets:
                statics.append({"targets": targets, "labels": {"host": host}})
        if statics:
            path = job.get("path", "/metrics")
            configs.append({"job_name": job["name"], "metrics_path": path, "static_configs": statics})
    return configs


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "monitoring_scrape_configs": monitoring_scrape_configs,
        }
