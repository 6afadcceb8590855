"""Filters every role of the kit may use (the roles list `pikit` as a dependency)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pikit_address(host: str, hostvars: Mapping[str, Any]) -> str:
    """The address the other nodes reach `host` at: its `node_ip`, else its `ansible_host`, else its name."""
    facts = hostvars[host]
    return str(facts.get("node_ip") or facts.get("ansible_host") or host)


def pikit_host_ports(hosts: list[str], hostvars: Mapping[str, Any], port: int) -> list[str]:
    """`address:port` of each host (bootstrap server lists)."""
    return [f"{pikit_address(host, hostvars)}:{int(port)}" for host in hosts]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"pikit_address": pikit_address, "pikit_host_ports": pikit_host_ports}
