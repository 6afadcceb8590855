"""The controller's Kafka clients: the cluster's trust and identities, and reading a topic to its
end (pikit_contract.topics, shared with the Spark apps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pikit_contract.topics import read_to_end

__all__ = ["mtls_client", "read_to_end", "trust_file"]


def trust_file(pki: Path) -> Path:
    """What a client of the cluster trusts: the trust bundle the pki role assembles (both CAs
    during a rotation), or the CA itself where the bundle is not there yet."""
    bundle = pki / "trust.crt"
    return bundle if bundle.exists() else pki / "ca.crt"


def mtls_client(bootstrap: list[str], pki: Path, principal: str = "admin") -> dict[str, Any]:
    """kafka-python options for a controller-held identity of the cluster's PKI (`<pki>/clients/`)."""
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": str(trust_file(pki)),
        "ssl_certfile": str(pki / "clients" / f"{principal}.pem"),
    }
