"""Ansible's linear strategy over Mitogen's connections (mitogen, pinned in requirements.txt).

Mitogen keeps one Python interpreter per host for the whole run and sends modules to it, where
Ansible otherwise starts a new interpreter over SSH for every task and loop item. The kit selects
it in ansible.cfg (`strategy`); `ANSIBLE_STRATEGY=linear` runs without it.
"""

import ansible_mitogen.loaders
import ansible_mitogen.strategy

_Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):  # type: ignore[misc,valid-type]
    pass
