"""The kafka role's `kafka_admin` module, importable by controller tools and tests.

The module lives in roles/kafka/library/ (Ansible runs it from there) and its parts in
roles/kafka/module_utils/, which it imports as `ansible.module_utils.kafka_*`, the names Ansible
gives a role's module_utils when it runs the module. This loads that same file with those names
resolving to the role's folder, so the demo and the tests use the role's own health gate and
reconciler rather than a copy.
"""

from __future__ import annotations

import ansible.module_utils

from pikit import REPO
from pikit.modules import from_file

_MODULE_UTILS = str(REPO / "roles/kafka/module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

kafka_admin = from_file("kafka_admin", REPO / "roles/kafka/library/kafka_admin.py")
