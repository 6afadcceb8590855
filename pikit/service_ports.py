"""Where the kit's services listen on a host, read from the inventory and the roles' defaults.

The firewall's rules and Prometheus's scrape jobs both need it (their filter plugins import this
module), so that a port is read one way and never written twice: a service names the variable
that holds its port, and the value is the host's, else the owning role's default.

A service (a dict, as the roles' vars write them) names its port in one of these ways:
`port_var` (with an optional literal `port` for a variable no role declares), `port`, `ports`
(a literal list), `listen_var` (a `host:port` the service binds; on loopback it serves no other
node), or `ports_from` ({var, names_var, key}: e.g. each site app's `metrics_port`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

LOOPBACK = ("127.", "localhost", "::1", "[::1]")
ANY = ("", "0.0.0.0", "::", "[::]")
_UNSET = object()


class ServiceError(ValueError):
    """A service names no port, or a variable that neither the host nor any role declares."""


@dataclass(frozen=True)
class Endpoint:
    port: int
    address: str | None = None  # a bind address of its own; None: the host's address


def role_defaults(kit_dir: str | Path, roles: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each role's defaults/main.yml as written: Jinja is left unrendered, so only literal values
    can be read from it (ports are literal)."""
    return {
        role: yaml.safe_load((Path(kit_dir) / "roles" / role / "defaults/main.yml").read_text()) or {}
        for role in roles
    }


def setting(
    name: str, facts: Mapping[str, Any], defaults: Mapping[str, Mapping[str, Any]], default: Any = _UNSET
) -> Any:
    """`name` as the host sets it, else as a role's defaults do, else `default`."""
    if name in facts:
        return facts[name]
    for values in defaults.values():
        if name in values:
            return values[name]
    if default is not _UNSET:
        return default
    raise ServiceError(f"no role declares {name!r}")


def _port(value: Any, where: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ServiceError(f"{where} is not a port number: {value!r}") from None


def endpoints(
    service: Mapping[str, Any], facts: Mapping[str, Any], defaults: Mapping[str, Mapping[str, Any]]
) -> list[Endpoint]:
    """Where `service` listens on the host whose variables are `facts`; [] where it serves no
    other node (port 0, or bound to loopback)."""
    name = service.get("name", "?")
    if "listen_var" in service:
        var = service["listen_var"]
        listen = str(setting(var, facts, defaults, service.get("listen", _UNSET)))
        if not listen:
            return []
        address, _, port = listen.rpartition(":")
        if address.startswith(LOOPBACK):
            return []
        found = _port(port, f"{var} ({listen})")
        return [Endpoint(found, None if address in ANY else address)] if found else []
    if "port_var" in service:
        var = service["port_var"]
        ports = [(setting(var, facts, defaults, service.get("port", _UNSET)), var)]
    elif "port" in service:
        ports = [(service["port"], f"{name}'s port")]
    elif "ports" in service:
        ports = [(port, f"{name}'s ports") for port in service["ports"]]
    elif "ports_from" in service:
        source = service["ports_from"]
        items = setting(source["var"], facts, defaults) or {}
        names = setting(source["names_var"], facts, defaults) or []
        ports = [
            (items[n].get(source["key"], 0), f"{source['var']}.{n}.{source['key']}")
            for n in names
            if n in items
        ]
    else:
        raise ServiceError(f"service {name!r} names no port")
    return [Endpoint(port) for port in (_port(value, where) for value, where in ports) if port]
