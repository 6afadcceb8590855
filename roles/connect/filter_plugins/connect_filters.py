"""The connect role's filters: MirrorMaker 2's connectors that copy a site's topics to a core.

The connectors run on the site's own workers. Each reads the site (read_committed) as the
workers' principal, and writes to the core through a producer of its own that presents the
site's identity for the core (a certificate of the core's CA): the records, and the connector's
offsets in a topic of its own on the core, commit in one transaction (KIP-618). Everything the
site writes on the core starts with `<site>.`, so the core's ACLs can hold each site to its own
prefix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# MirrorMaker 2 copies bytes: the workers' string converters would re-encode them.
_BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"


def _tls(prefix: str, cluster: Mapping[str, Any]) -> dict[str, str]:
    return {
        f"{prefix}security.protocol": "SSL",
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(cluster["keystore"]),
        f"{prefix}ssl.truststore.type": "PEM",
        f"{prefix}ssl.truststore.location": str(cluster["truststore"]),
        f"{prefix}ssl.endpoint.identification.algorithm": "https",
    }


def mirror_offsets_topic(site: str) -> str:
    """The mirror connectors' offsets topic on the core, under the site's prefix."""
    return f"{site}.mm2-offsets.internal"


def connect_mirror_connectors(
    site: Mapping[str, Any],
    core: Mapping[str, Any],
    topics: list[str],
    replication_factor: int = 3,
    groups: str = ".*",
) -> list[dict[str, Any]]:
    """The two connectors of a site's mirror to its core, as connect_connectors entries.

    `site` and `core` are each {alias, bootstrap: [host:port], keystore, truststore}: the PEM
    bundle and CA the workers present and trust on that cluster (paths on the workers). The
    source connector copies `topics` to `<site>.<topic>` exactly once; the checkpoint connector
    writes the consumer groups' (`groups`, a regex) translated offsets to
    `<site>.checkpoints.internal`, so that a consumer can move from the site to the core."""
    alias, target = str(site["alias"]), str(core["alias"])
    if not re.fullmatch(r"[A-Za-z0-9_-]+", alias) or alias == target:
        raise ValueError(
            f"the site's alias {alias!r} must be letters, digits, - or _ and differ from the core's "
            f"({target!r}): it prefixes every topic the site writes on the core"
        )
    if not topics:
        raise ValueError("the mirror names no topic")
    common = {
        "source.cluster.alias": alias,
        "target.cluster.alias": target,
        "source.cluster.bootstrap.servers": ",".join(site["bootstrap"]),
        "target.cluster.bootstrap.servers": ",".join(core["bootstrap"]),
        **_tls("source.cluster.", site),
        **_tls("target.cluster.", core),
        # The connector's own producer writes to the core, as the site's identity there; the
        # worker reads and creates the connector's offsets topic there too (KIP-618): a worker
        # that read it on the site found none after a kill -9, and copied everything again.
        **{
            f"{client}.override.bootstrap.servers": ",".join(core["bootstrap"])
            for client in ("producer", "consumer", "admin")
        },
        **_tls("producer.override.", core),
        **_tls("consumer.override.", core),
        **_tls("admin.override.", core),
        "offsets.storage.topic": mirror_offsets_topic(alias),
        "key.converter": _BYTES,
        "value.converter": _BYTES,
        "replication.factor": str(replication_factor),
        "offset-syncs.topic.replication.factor": str(replication_factor),
        "checkpoints.topic.replication.factor": str(replication_factor),
        "tasks.max": "1",
    }
    return [
        {
            "name": f"{alias}.mirror",
            "config": {
                "connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
                **common,
                "topics": ",".join(re.escape(topic) for topic in topics),
                # Records and offsets in one transaction, the aborted ones never copied.
                "exactly.once.support": "required",
                "consumer.isolation.level": "read_committed",
                # The core's ACLs and topic settings are the core's own.
                "sync.topic.acls.enabled": "false",
                "sync.topic.configs.enabled": "false",
            },
        },
        {
            "name": f"{alias}.checkpoints",
            "config": {
                "connector.class": "org.apache.kafka.connect.mirror.MirrorCheckpointConnector",
                **common,
                "groups": groups,
                "emit.checkpoints.interval.seconds": "30",
                "sync.group.offsets.enabled": "false",
            },
        },
    ]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"connect_mirror_connectors": connect_mirror_connectors}
