"""Filters of the monitoring role: Prometheus's scrape jobs from the inventory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from pikit.site_model import SiteModelError, service_endpoints


def _targets(job: Mapping[str, Any], host: str, site: Mapping[str, Any]) -> list[str]:
    """`address:port` of each endpoint `job` scrapes on a host; [] where it serves none that
    another node can reach."""
    try:
        if "service" in job:
            return service_endpoints(site, job["service"], [host])
        ports = [job["port"]] if "port" in job else list(job.get("ports", []))
        address = site["hosts"][host]["address"]
        return [f"{address}:{int(port)}" for port in ports if int(port)]
    except (SiteModelError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"monitoring_jobs: job {job.get('name', '?')!r}: {exc}") from None


def monitoring_scrape_configs(
    jobs: list[Mapping[str, Any]], groups: Mapping[str, list[str]], site: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Prometheus `scrape_configs` for `jobs` ({name, groups, path} and a `service` of the site
    model, or a literal `port` or `ports`): one static config per host, labelled with its inventory
    name (`host`), so that alerts name a host as the inventory does. A job with no target on any
    host is left out."""
    configs = []
    for job in jobs:
        hosts = sorted({h for group in job["groups"] for h in groups.get(group, [])})
        statics = []
        for host in hosts:
            targets = _targets(job, host, site)
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
