"""Filters of the monitoring role: Prometheus's scrape jobs from the inventory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from pikit.service_ports import ServiceError, endpoints


def _targets(
    job: Mapping[str, Any], facts: Mapping[str, Any], host_address: str, role_defaults: Mapping[str, Any]
) -> list[str]:
    """`address:port` of each endpoint `job` scrapes on a host; [] where it serves none that
    another node can reach (port 0, or a listen address on loopback)."""
    try:
        found = endpoints(job, facts, role_defaults)
    except ServiceError as exc:
        raise AnsibleFilterError(f"monitoring_jobs: job {job.get('name', '?')!r}: {exc}") from None
    return [f"{endpoint.address or host_address}:{endpoint.port}" for endpoint in found]


def monitoring_scrape_configs(
    jobs: list[Mapping[str, Any]],
    groups: Mapping[str, list[str]],
    hostvars: Mapping[str, Any],
    addresses: Mapping[str, str],
    role_defaults: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Prometheus `scrape_configs` for `jobs` ({name, groups, path} and a port named one of the ways
    pikit/service_ports.py reads, from each host's variables, else `role_defaults`): one static
    config per host at its address (`addresses`: host -> pikit_address), labelled with its
    inventory name (`host`), so that alerts name a host as the inventory does. A job with no target
    on any host is left out."""
    configs = []
    for job in jobs:
        hosts = sorted({h for group in job["groups"] for h in groups.get(group, [])})
        statics = []
        for host in hosts:
            targets = _targets(job, hostvars[host], addresses[host], role_defaults or {})
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
