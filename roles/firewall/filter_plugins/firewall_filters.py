"""Filters of the firewall role: one node's nftables rules from the inventory.

Each service of the kit names the inventory groups that run it, the site model's service whose
ports it opens (pikit/site_model.py: each role tells the model what its hosts serve, so no port
number is written twice), and the classes of sources that may reach it. A class is a set of
addresses: the hosts of some groups, plus ranges the user sets. The result is a list of nftables
match expressions, in order.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from pikit.site_model import SiteModelError, service_ports

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _network(value: str, where: str) -> Network:
    try:
        return ipaddress.ip_network(str(value).strip("[]"), strict=False)
    except ValueError:
        raise AnsibleFilterError(
            f"firewall: {where} is {value!r}, not an IP address or range; the firewall matches "
            "addresses, not names (set node_ip or ansible_host to the address, or firewall_enabled: false)"
        ) from None


def _text(network: Network) -> str:
    return str(network.network_address) if network.num_addresses == 1 else str(network)


def firewall_sources(
    classes: Mapping[str, Any], groups: Mapping[str, list[str]], site: Mapping[str, Any]
) -> dict[str, list[str]]:
    """Each source class ({name: {groups: [...], ranges: [...]}}) as a sorted list of networks:
    the addresses of its groups' hosts (as the site model has them) and its extra ranges."""
    resolved: dict[str, list[str]] = {}
    for name, spec in classes.items():
        networks: set[Network] = set()
        for group in spec.get("groups", []):
            for host in groups.get(group, []):
                networks.add(_network(site["hosts"][host]["address"], f"the address of host {host}"))
        for value in spec.get("ranges", []) or []:
            networks.add(_network(value, f"a range of source class {name!r} ({spec.get('var', name)})"))
        resolved[name] = [_text(n) for n in sorted(networks, key=lambda n: (n.version, n))]
    return resolved


def _ports(service: Mapping[str, Any], host: str, site: Mapping[str, Any]) -> list[str]:
    """The ports `service` listens on at this host, as nftables writes them ("9092", "4040-4041"):
    the site model's `service`, or a literal `port` or `ports` (a service of the site's own); []
    where it listens on none another node can reach. `span`: the ports as one range."""
    name = service.get("name", "?")
    try:
        if "service" in service:
            ports = service_ports(site, service["service"], host)
        elif "port" in service:
            ports = [int(service["port"])]
        elif "ports" in service:
            ports = [int(port) for port in service["ports"]]
        else:
            raise SiteModelError("names no service, port or ports")
    except (SiteModelError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"firewall: service {name!r}: {exc}") from None
    ports = [port for port in ports if port]
    if service.get("span") and len(ports) > 1:
        return [f"{min(ports)}-{max(ports)}"]
    return [str(port) for port in ports]


def _split(networks: Iterable[str]) -> tuple[list[str], list[str]]:
    v4 = [n for n in networks if ":" not in n]
    v6 = [n for n in networks if ":" in n]
    return v4, v6


def _matches(proto: str, ports: list[str], v4: list[str], v6: list[str]) -> list[str]:
    """nftables match expressions for `proto` to `ports` from the networks given ([] is none)."""
    dport = f" {proto} dport {{ {', '.join(ports) if ports else '1-65535'} }}"
    found = []
    if "0.0.0.0/0" in v4 and "::/0" in v6:
        return [dport.strip()]
    for family, networks, any_net in (("ip", v4, "0.0.0.0/0"), ("ip6", v6, "::/0")):
        if any_net in networks:
            found.append(f"meta nfproto {'ipv4' if family == 'ip' else 'ipv6'}{dport}")
        elif networks:
            found.append(f"{family} saddr {{ {', '.join(networks)} }}{dport}")
    return found


def firewall_rules(
    host: str,
    site: Mapping[str, Any],
    groups: Mapping[str, list[str]],
    services: list[Mapping[str, Any]],
    sources: Mapping[str, list[str]],
) -> dict[str, Any]:
    """This host's rules: {accept: [{name, why, matches}], guarded: {tcp: [...], udp: [...]},
    peers: [{name, why, matches}]}.

    `accept` opens each service the host runs to its source classes. `guarded` lists every port
    those services use, which the template drops before `peers`, the services that open every
    port to a class (Spark's executors pick theirs at random): a port the kit names is reachable
    only from the sources it names, even on a host that is also a Spark node."""
    member = {group for group, hosts in groups.items() if host in hosts} | {"all"}
    accept: list[dict[str, Any]] = []
    peers: list[dict[str, Any]] = []
    guarded: dict[str, list[str]] = {"tcp": [], "udp": []}
    for service in services:
        if not member & set(service["groups"]):
            continue
        proto = service.get("proto", "tcp")
        unknown = set(service["from"]) - set(sources)
        if unknown:
            raise AnsibleFilterError(
                f"firewall: service {service['name']!r} names unknown sources {sorted(unknown)}"
            )
        networks = sorted({n for cls in service["from"] for n in sources[cls]})
        v4, v6 = _split(networks)
        if service.get("any_port"):
            entry = {
                "name": service["name"],
                "why": service.get("why", ""),
                "matches": _matches(proto, [], v4, v6),
            }
            if entry["matches"]:
                peers.append(entry)
            continue
        ports = _ports(service, host, site)
        if not ports:
            continue
        guarded[proto] += [p for p in ports if p not in guarded[proto]]
        matches = _matches(proto, ports, v4, v6)
        if matches:
            accept.append({"name": service["name"], "why": service.get("why", ""), "matches": matches})
    return {"accept": accept, "guarded": guarded, "peers": peers}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "firewall_sources": firewall_sources,
            "firewall_rules": firewall_rules,
        }
