"""A site and a core on loopback, each a real KRaft broker with its own CA, and a real Connect worker
on the site running the connect role's configuration and its mirror's connectors: what
tests/integration/test_mirror.py judges and bench/mirror.py times."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.pikit.cluster.plugins.modules import kafka_admin
from pikit_contract.readings import READINGS_TOPIC

from pikit import REPO
from pikit_testkit.broker import LocalBroker
from pikit_testkit.certs import certificate, new_key, pem
from pikit_testkit.connect import GROUP, LocalWorker
from pikit_testkit.modules import from_file

kafka_filters = from_file("kafka_filters", REPO / "roles/kafka/filter_plugins/kafka_filters.py")
connect_filters = from_file("connect_filters", REPO / "roles/connect/filter_plugins/connect_filters.py")


@dataclass
class Clusters:
    site: LocalBroker
    core: LocalBroker
    site_admin: dict[str, Any]
    core_admin: dict[str, Any]
    core_as_site: dict[str, Any]  # the site's identity on the core
    worker: LocalWorker
    connectors: list[dict[str, Any]]
    worker_tls: Path  # the worker's identity on the site, and the site's CA


def _ca(work: Path, name: str) -> tuple[Any, Path]:
    key = new_key()
    path = work / f"{name}-ca.crt"
    path.write_bytes(pem(None, certificate(f"{name} CA", key, f"{name} CA", key, ca=True)))
    return key, path


def _identity(path: Path, cn: str, ca: tuple[Any, Path], ca_name: str) -> Path:
    key = new_key()
    path.write_bytes(pem(key, certificate(cn, key, f"{ca_name} CA", ca[0], ip="127.0.0.1")))
    return path


def _client(broker: LocalBroker, bundle: Path, ca: Path) -> dict[str, Any]:
    return {
        "bootstrap_servers": [broker.address],
        "security_protocol": "SSL",
        "ssl_cafile": str(ca),
        "ssl_certfile": str(bundle),
    }


@contextlib.contextmanager
def mirror_pair(
    work: Path,
    site_name: str,
    topics: dict[str, int],
    short_lived: bool = True,
    worker_jvm: list[str] | None = None,
) -> Iterator[Clusters]:
    """Both brokers and the worker started, the site's `topics` ({name: partitions}) made, both
    sides' ACLs as the kafka role gives them (the site's for `connect`, the core's for the site);
    the connectors are the caller's to create (`Clusters.connectors`)."""
    site_ca, core_ca = _ca(work, "site"), _ca(work, "core")
    site_admin_pem = _identity(work / "site-admin.pem", "bench", site_ca, "site")
    core_admin_pem = _identity(work / "core-admin.pem", "bench", core_ca, "core")
    tls_dir = work / "tls"
    tls_dir.mkdir()
    (tls_dir / "ca.crt").write_bytes(site_ca[1].read_bytes())
    _identity(tls_dir / "kafka-connect.pem", "connect", site_ca, "site")
    core_pem = _identity(tls_dir / "core.pem", f"site.{site_name}", core_ca, "core")

    site = LocalBroker(
        work / "site", tls=(site_admin_pem, site_ca[1]), short_lived=short_lived, cn_principals=True
    )
    core = LocalBroker(
        work / "core", tls=(core_admin_pem, core_ca[1]), short_lived=short_lived, cn_principals=True
    )
    (work / "worker").mkdir()
    worker = LocalWorker(work / "worker", site, tls_dir, jvm=worker_jvm)
    try:
        site.start()
        core.start()
        site_admin = _client(site, site_admin_pem, site_ca[1])
        core_admin = _client(core, core_admin_pem, core_ca[1])
        connect = {"principal": "connect", "group_id": GROUP}
        site_acls = kafka_filters.kafka_default_acls([], "spark", READINGS_TOPIC, sorted(topics), [], connect)
        declared = [{"name": name, "partitions": n, "replication_factor": 1} for name, n in topics.items()]
        for admin, acls, wanted in (
            (site_admin, site_acls, declared),
            (core_admin, kafka_filters.kafka_mirror_site_acls([site_name], GROUP), []),
        ):
            kafka_admin.run(kafka_admin.params_with_defaults(**admin, topics=wanted, acls=acls), False)
        connectors = connect_filters.connect_mirror_connectors(
            {
                "alias": site_name,
                "bootstrap": [site.address],
                "keystore": tls_dir / "kafka-connect.pem",
                "truststore": tls_dir / "ca.crt",
            },
            {"alias": "core", "bootstrap": [core.address], "keystore": core_pem, "truststore": core_ca[1]},
            list(topics),
            replication_factor=1,
        )
        worker.start()
        core_as_site = _client(core, core_pem, core_ca[1])
        yield Clusters(site, core, site_admin, core_admin, core_as_site, worker, connectors, tls_dir)
    finally:
        worker.stop()
        site.stop()
        core.stop()
