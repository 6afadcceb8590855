"""One model of the site, computed once per run from the inventory: each host's address and
groups, and the endpoints of every service it runs.

The preflight (roles/pikit/tasks/site.yml) builds it with Ansible's own view of the variables:
each role, in its own scope (its defaults, the inventory, `-e`), tells what a host serves
(`_<role>_serves` in its vars, recorded by its tasks/validate.yml as the fact
`_<role>_site`), and this module gathers those facts. The roles read the model as the
fact `pikit_site`; the controller's tools read the same model from `<pikit_state_dir>/site.json`,
which the preflight writes, never from the roles' defaults files.

A service's endpoints, as a role declares them, are one of: a port (0: none), a `host:port` the
service binds (on loopback it serves no other node; on a wildcard, the host's address), a dict
{port, address}, or a list of these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# The groups a host's roles follow from (the inventory's names are fixed: roles/pikit/README.md).
KIT_GROUPS = (
    "kafka_controller",
    "kafka_broker",
    "kafka_connect",
    "spark_master",
    "spark_worker",
    "spark_driver",
    "edge",
    "monitoring",
)
# The roles whose facts the model gathers, and the groups whose hosts each must have told.
ROLE_GROUPS: dict[str, tuple[str, ...]] = {
    "pikit": ("all",),
    "common": ("all",),
    "kafka": ("kafka_controller", "kafka_broker"),
    "connect": ("kafka_connect",),
    "spark": ("spark_master", "spark_worker", "spark_driver"),
    "edge_agent": ("edge",),
    "monitoring": ("monitoring",),
}
LOOPBACK = ("127.", "localhost", "::1", "[::1]")
WILDCARD = ("", "0.0.0.0", "::", "[::]")


class SiteModelError(ValueError):
    """A declared endpoint is not a port, or the model lacks what a consumer asks of it."""


def driver_pis(groups: Mapping[str, Iterable[str]]) -> list[str]:
    """The Pis that run the streaming apps' drivers, first-ranked first: the inventory's
    spark_driver, else the master's Pi. The preflight (roles/pikit/tasks/preflight.yml) puts the
    master in spark_driver where the inventory names none; the controller's tools, which read the
    inventory, follow the same rule here."""
    return list(groups.get("spark_driver") or groups.get("spark_master") or [])


def address(host: str, hostvars: Mapping[str, Any]) -> str:
    """The address the other nodes reach `host` at: its `node_ip`, else its `ansible_host`, else
    its name. The kit's one rule for it."""
    facts = hostvars[host]
    return str(facts.get("node_ip") or facts.get("ansible_host") or host)


def _port(value: Any, where: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise SiteModelError(f"{where} is not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise SiteModelError(f"{where} is out of range: {port}")
    return port


def endpoints(value: Any, where: str) -> list[dict[str, Any]]:
    """A service's endpoints as a role declares them, each {port, address}; address None is the
    host's own. [] where the service serves no other node."""
    if value is None or value == "":
        return []
    if isinstance(value, list | tuple):
        return [found for item in value for found in endpoints(item, where)]
    if isinstance(value, Mapping):
        port = _port(value.get("port"), where)
        bound = value.get("address") or None
        return [{"port": port, "address": None if bound in WILDCARD else str(bound)}] if port else []
    if isinstance(value, str) and ":" in value:
        bound, _, port_text = value.rpartition(":")
        port = _port(port_text, f"{where} ({value})")
        if not port or bound.startswith(LOOPBACK):
            return []
        return [{"port": port, "address": None if bound in WILDCARD else bound}]
    port = _port(value, where)
    return [{"port": port, "address": None}] if port else []


def site_model(
    groups: Mapping[str, Iterable[str]], hostvars: Mapping[str, Any], cluster: str = ""
) -> dict[str, Any]:
    """The model: {cluster, groups: {kit group: hosts}, hosts: {host: {address, groups, services:
    {name: [{port, address}]}, told: [roles]}}, settings: {name: value}}.

    A service's endpoint address is the host's unless the service binds another. `told` names the
    roles whose facts this host had; `settings` are the values the controller's tools need, as the
    roles told them (the first host to tell one wins: they are site-wide)."""
    everyone = list(dict.fromkeys(groups.get("all", hostvars.keys())))
    kit_groups = {group: list(groups.get(group, [])) for group in KIT_GROUPS}
    hosts: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for host in everyone:
        facts = hostvars[host]
        here = address(host, hostvars)
        services: dict[str, list[dict[str, Any]]] = {}
        told = []
        for role in ROLE_GROUPS:
            serves = facts.get(f"_{role}_site")
            if serves is None:
                continue
            told.append(role)
            for name, value in (serves.get("services") or {}).items():
                found = endpoints(value, f"host {host}: service {name}")
                services[name] = [{"port": e["port"], "address": e["address"] or here} for e in found]
            for name, value in (serves.get("settings") or {}).items():
                settings.setdefault(name, value)
        hosts[host] = {
            "address": here,
            "groups": sorted(g for g, members in kit_groups.items() if host in members),
            "services": services,
            "told": told,
        }
    return {"cluster": cluster, "groups": kit_groups, "hosts": hosts, "settings": settings}


def _told(model: Mapping[str, Any], host: str, service: str) -> list[dict[str, Any]]:
    entry = model["hosts"].get(host)
    if entry is None:
        raise SiteModelError(f"host {host} is not in the site model")
    if service not in entry["services"]:
        roles = [
            role
            for role, groups in ROLE_GROUPS.items()
            if "all" in groups or set(groups) & set(entry["groups"])
        ]
        missing = sorted(set(roles) - set(entry["told"]))
        raise SiteModelError(
            f"the site model has no service {service!r} on host {host}"
            + (
                f" (roles {', '.join(missing)} have not told it what the host serves: run "
                "playbooks/preflight.yml in the same run; every playbook of the kit does)"
                if missing
                else ""
            )
        )
    found: list[dict[str, Any]] = entry["services"][service]
    return found


def service_addresses(model: Mapping[str, Any], service: str, hosts: Iterable[str]) -> list[tuple[str, int]]:
    """(address, port) of `service` on each of `hosts`, in their order."""
    return [(e["address"], e["port"]) for host in hosts for e in _told(model, host, service)]


def service_endpoints(model: Mapping[str, Any], service: str, hosts: Iterable[str]) -> list[str]:
    """`address:port` of `service` on each of `hosts`, in their order (bootstrap lists, scrape
    targets)."""
    return [f"{address}:{port}" for address, port in service_addresses(model, service, hosts)]


def service_ports(model: Mapping[str, Any], service: str, host: str) -> list[int]:
    """The ports `service` listens on at `host`; [] where it serves no other node."""
    return [e["port"] for e in _told(model, host, service)]
