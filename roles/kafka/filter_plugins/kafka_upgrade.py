"""Filters of the kafka role's upgrade (playbooks/kafka-upgrade.yml): what the cluster runs, whether
it may be upgraded to a version, and which feature levels finalizing raises."""

from __future__ import annotations

import re
from typing import Any

# `kafka-storage version-mapping`: `metadata.version=27 (4.3-IV0)` or `group.version=1`.
_MAPPING = re.compile(r"^\s*(?P<name>[a-z][a-z0-9_.]*)=(?P<level>\d+)(?:\s+\([^)]*\))?\s*$")
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


def _release(version: str) -> tuple[int, int, int]:
    match = _RELEASE.match(str(version).strip())
    if not match:
        raise ValueError(f"kafka_version={version!r} is not a release number like 4.3.1")
    return (int(match[1]), int(match[2]), int(match[3]))


def kafka_installed_versions(link_targets: dict[str, str]) -> dict[str, str]:
    """{host: release} from each node's `current` link target (`/opt/kafka/kafka_2.13-4.3.1`);
    '' where no release is installed."""
    found = {}
    for host, target in link_targets.items():
        match = re.search(r"kafka_[0-9.]+-([0-9]+\.[0-9]+\.[0-9]+)/?$", target or "")
        found[host] = match[1] if match else ""
    return found


def kafka_downgrades(installed: dict[str, str], target: str) -> list[str]:
    """A refusal for each node that runs a newer Kafka than `target`: Kafka has no binary downgrade
    once a node has run a newer version's metadata, and a stale kafka_version in an inventory must
    not roll a cluster back."""
    _release(target)
    newer = sorted(h for h, v in installed.items() if _RELEASE.match(v) and _release(v) > _release(target))
    return [
        f"{host} runs Kafka {installed[host]}, newer than kafka_version={target}: a downgrade is refused "
        "(set kafka_version to the release the cluster runs)"
        for host in newer
    ]


def kafka_upgrade_refusals(installed: dict[str, str], target: str) -> list[str]:
    """Why the cluster may not be upgraded to `target`, one reason per line; none means it may.

    Every node must run one release: an upgrade that stopped half-way (some nodes at `target`,
    the rest at one older release) is finished by running it again, which this allows."""
    refusals = kafka_downgrades(installed, target)
    missing = sorted(host for host, version in installed.items() if not version)
    if missing:
        refusals.append(f"no Kafka installed on {', '.join(missing)}: converge it with site.yml first")
    older = {v for v in installed.values() if v and v != target}
    if len(older) > 1:
        listing = "; ".join(f"{host} runs {v or 'nothing'}" for host, v in sorted(installed.items()))
        refusals.append(f"the nodes run different Kafka releases ({listing}): bring them to one first")
    return refusals


def kafka_release_line(version: str) -> str:
    """`4.3.1` -> `4.3`, the form `--release-version` takes."""
    major, minor, _ = _release(version)
    return f"{major}.{minor}"


def kafka_version_mapping(mapping: str, keep: list[str] | None = None) -> dict[str, int]:
    """A release's default feature levels, from `kafka-storage version-mapping --release-version`
    (`metadata.version=30 (4.3)`, `group.version=1`, ...), without the features in `keep`.
    `kraft.version` belongs in `keep` unless the quorum is to become dynamic: `kafka-features
    upgrade --release-version` raises it too, which turns a static quorum dynamic (KAFKA-21426)."""
    levels = {m["name"]: int(m["level"]) for m in map(_MAPPING.match, mapping.splitlines()) if m}
    if "metadata.version" not in levels:
        raise ValueError(f"no metadata.version in the version mapping: {mapping[:200]!r}")
    return {name: level for name, level in levels.items() if name not in (keep or [])}


def kafka_host_of_node(node_id: Any, hostvars: dict[str, Any], hosts: list[str]) -> str:
    """The inventory name of the node with this id (kafka_node.id), or '' when none has it."""
    for host in hosts:
        if str(hostvars[host].get("kafka_node", {}).get("id")) == str(node_id):
            return host
    return ""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kafka_installed_versions": kafka_installed_versions,
            "kafka_downgrades": kafka_downgrades,
            "kafka_upgrade_refusals": kafka_upgrade_refusals,
            "kafka_release_line": kafka_release_line,
            "kafka_version_mapping": kafka_version_mapping,
            "kafka_host_of_node": kafka_host_of_node,
        }
