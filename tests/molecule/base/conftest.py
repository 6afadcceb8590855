"""The base roles' verifiers (playbooks/common.yml: common, pi_base, firewall), run by molecule
edge_agent/default on its nodes, whose converge gives them the base as site.yml does. They name
the nodes by the groups the inventory puts them in, and take their addresses from it."""

from __future__ import annotations

from typing import Any

import pytest
from pikit_testkit.molecule_lab import Node, inventory_nodes


@pytest.fixture(scope="session")
def nodes(request: pytest.FixtureRequest) -> list[Node]:
    """Every node of the scenario's inventory."""
    inventory = request.config.option.ansible_inventory
    if not inventory:
        pytest.fail("no lab to verify: no --ansible-inventory (run through molecule)", pytrace=False)
    return inventory_nodes(inventory)


@pytest.fixture()
def node(host: Any, nodes: list[Node]) -> Node:
    """The inventory's node that testinfra's `host` is."""
    name = host.ansible.get_variables()["inventory_hostname"]
    return next(node for node in nodes if node.name == name)
