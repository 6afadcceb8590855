"""The controller's Kafka clients: the cluster's trust and identities, and reading a topic to its
end (pikit_contract.topics, shared with the Spark apps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pikit_contract.brokers import PROBE_TIMEOUT_S, answering
from pikit_contract.tls_handshake import bound_tls_handshakes
from pikit_contract.topics import read_to_end

from pikit.site import Site

__all__ = ["answering_brokers", "mtls_client", "read_to_end", "trust_file"]


def trust_file(pki: Path) -> Path:
    """What a client of the cluster trusts: the trust bundle the pki role assembles (both CAs
    during a rotation), or the CA itself where the bundle is not there yet."""
    bundle = pki / "trust.crt"
    return bundle if bundle.exists() else pki / "ca.crt"


def mtls_client(bootstrap: list[str], pki: Path, principal: str = "admin") -> dict[str, Any]:
    """kafka-python options for a controller-held identity of the cluster's PKI (`<pki>/clients/`).
    Every kafka-python TLS handshake of this process is bounded from here on: a broker that hangs
    holds `pikit status` for seconds, not for as long as it hangs (pikit_contract/tls_handshake.py)."""
    bound_tls_handshakes()
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(trust_file(pki)),
        "ssl_certfile": str(pki / "clients" / f"{principal}.pem"),
    }


def answering_brokers(site: Site, pki: Path) -> list[str]:
    """host:port of each broker of the inventory that answers a request over mTLS within
    PROBE_TIMEOUT_S, each given the whole bound: a hung broker's kernel still takes a connection,
    and a client started from it would wait on it."""
    found = site.addresses("kafka-client", site.hosts("kafka_broker"))
    servers = [f"{address}:{port}" for address, port in found]
    return answering(mtls_client(servers, pki), PROBE_TIMEOUT_S, grace=PROBE_TIMEOUT_S)
