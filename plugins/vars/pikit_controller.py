"""The controller is reached as the operator who runs Ansible: never through become.

A site's inventory sets `ansible_become: true` for group `all`, as Raspberry Pi OS's Imager user
reaches root through sudo. Ansible gives the implicit `localhost` the variables of group `all`, and
a connection variable outranks a task's `become: false`. Every task delegated to the controller
(its CA, the Kafka format records, the site model) would then go through sudo on the operator's
own machine: ask for a password, or fail where there is no sudo at all. Mitogen does so even when
the operator is root (`linear` skips a become to the user it already is).

This plugin gives `localhost` `ansible_become: false` as a host variable, which outranks group
`all`. It is enabled in ansible.cfg (`vars_plugins_enabled`) and in every molecule scenario.
"""

from __future__ import annotations

from typing import Any

from ansible.inventory.host import Host
from ansible.plugins.vars import BaseVarsPlugin

DOCUMENTATION = """
    name: pikit_controller
    short_description: the controller's own tasks never become
    description: Gives the host localhost ansible_become false, above the inventory's group all.
    options:
      stage:
        ini:
          - key: stage
            section: vars_pikit_controller
        env:
          - name: ANSIBLE_VARS_PLUGIN_STAGE
"""

CONTROLLER = "localhost"


class VarsModule(BaseVarsPlugin):  # type: ignore[misc]  # ansible ships no type information
    REQUIRES_ENABLED = True

    def get_vars(self, loader: Any, path: str, entities: Any, cache: bool = True) -> dict[str, Any]:
        super().get_vars(loader, path, entities)
        hosts = entities if isinstance(entities, list) else [entities]
        if any(isinstance(entity, Host) and entity.name == CONTROLLER for entity in hosts):
            return {"ansible_become": False}
        return {}
