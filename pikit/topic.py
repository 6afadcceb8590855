"""The controller's Kafka clients: the cluster's trust and identities, and reading a topic to its
end (pikit_contract.topics, shared with the Spark apps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pikit_contract.brokers import PROBE_GRACE_S, PROBE_TIMEOUT_S, answering
from pikit_contract.tls_handshake import bound_tls_handshakes
from pikit_contract.topics import read_to_end

from pikit.site import Site, SiteError

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


def answering_brokers(site: Site, pki: Path, grace: float = PROBE_GRACE_S) -> list[str]:
    """host:port of the inventory's brokers that answer a request over mTLS within
    PROBE_TIMEOUT_S; those not answered within `grace` s of the first answer are left out (a
    client needs one to start; `pikit status`, which judges each, gives them the whole bound). A
    hung broker's kernel still takes a connection, and a client started from it would wait on it."""
    found = site.addresses("kafka-client", site.hosts("kafka_broker"))
    client = mtls_client([f"{address}:{port}" for address, port in found], pki)
    identity = client["ssl_certfile"]
    if not Path(identity).exists():
        raise SiteError(f"{identity} is missing: the identity site.yml makes for the controller")
    return answering(client, PROBE_TIMEOUT_S, grace=grace)
