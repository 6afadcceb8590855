"""What a TLS listener offers, found the way a scanner finds it, by `openssl s_client` handshakes:
one per protocol version, then, for TLS 1.2 and 1.3, suites found by elimination.

    python -m pikit.tlsscan HOST:PORT --ca CA.crt [--cert CLIENT.pem]

Elimination: offer every suite this OpenSSL knows; the server picks one it accepts; offer the rest
again, until the server refuses them all. That finds every accepted suite in one handshake more
than there are accepted suites (about 15 per listener for the kit's AEAD-only policy), where one
handshake per known suite took about 160.

A listener that demands a client certificate (mTLS) is scanned with one, so that a refusal
means the suite or the version, not the missing certificate.

A handshake that gets no answer in time is tried again, then the scan stops with `NoAnswerError`: a
silence is not a refusal. Read as one, it dropped TLS 1.2 from a Kafka listener whose node the
CPU had starved for 20 s (molecule kafka/default in make test-ops, 2026-12-05), and in the middle
of an elimination it would leave the suites not yet found unreported, weak ones included.
"""

from __future__ import annotations

import argparse
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# s_client's switch for each version; the old ones only at security level 0, or this
# OpenSSL would refuse them itself and the scan would prove nothing about the server.
PROTOCOLS = {"TLSv1": "-tls1", "TLSv1.1": "-tls1_1", "TLSv1.2": "-tls1_2", "TLSv1.3": "-tls1_3"}
TLS13_SUITES = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_CCM_SHA256",
    "TLS_AES_128_CCM_8_SHA256",
]
# Forward secrecy and an AEAD cipher: what the kit's default policy allows under TLS 1.2.
AEAD_TLS12 = {
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
}
AEAD_TLS13 = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}


class NoAnswerError(Exception):
    """A handshake neither completed nor was refused in any of its tries: nothing is known."""


@dataclass(frozen=True)
class Patience:
    """How long one handshake may take, and how many times a silent one is tried."""

    timeout: float = 20.0
    tries: int = 3


@dataclass
class Offer:
    protocols: set[str] = field(default_factory=set)
    suites: dict[str, set[str]] = field(default_factory=dict)  # protocol -> suites accepted
    handshakes: int = 0

    def weaker_than_aead(self) -> list[str]:
        """Everything accepted beyond TLS 1.3/1.2 with forward-secret AEAD suites."""
        found = [f"{p} accepted" for p in sorted(self.protocols - {"TLSv1.2", "TLSv1.3"})]
        found += [f"TLSv1.2 {s}" for s in sorted(self.suites.get("TLSv1.2", set()) - AEAD_TLS12)]
        found += [f"TLSv1.3 {s}" for s in sorted(self.suites.get("TLSv1.3", set()) - AEAD_TLS13)]
        return found


def tls12_suites() -> list[str]:
    """Every TLS 1.2 suite this OpenSSL can offer, weak ones included."""
    out = subprocess.run(
        ["openssl", "ciphers", "-tls1_2", "ALL:COMPLEMENTOFALL:@SECLEVEL=0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [s for s in out.strip().split(":") if s and s not in TLS13_SUITES]


def handshake(
    address: str,
    ca: Path,
    cert: Path | None,
    protocol: str,
    suites: list[str] | None = None,
    patience: Patience = Patience(),
) -> str | None:
    """The suite negotiated when offering `suites` (all this OpenSSL knows when None), or None
    when the server refused; NoAnswerError when it did neither in `patience`."""
    cmd = ["openssl", "s_client", "-connect", address, "-CAfile", str(ca), PROTOCOLS[protocol]]
    if cert:
        cmd += ["-cert", str(cert), "-key", str(cert)]
    if protocol == "TLSv1.3":
        cmd += ["-ciphersuites", ":".join(suites or TLS13_SUITES)]
    else:
        cmd += ["-cipher", f"{':'.join(suites) if suites else 'ALL:COMPLEMENTOFALL'}:@SECLEVEL=0"]
    for _ in range(patience.tries):
        try:
            result = subprocess.run(
                cmd, input=b"", capture_output=True, timeout=patience.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            continue
        return _negotiated(result)
    tried = f"{patience.tries} tries of {patience.timeout:g} s"
    raise NoAnswerError(f"{address}: no answer to a {protocol} handshake in {tried}")


def _negotiated(result: subprocess.CompletedProcess[bytes]) -> str | None:
    for line in result.stdout.decode(errors="replace").splitlines():
        # "New, TLSv1.3, Cipher is TLS_AES_256_GCM_SHA384"; "(NONE)" when nothing was agreed.
        if line.startswith("New, ") and "Cipher is " in line:
            negotiated = line.split("Cipher is ", 1)[1].strip()
            return None if negotiated == "(NONE)" or result.returncode else negotiated
    return None


def accepted_suites(
    address: str,
    ca: Path,
    cert: Path | None,
    protocol: str,
    offered: list[str],
    patience: Patience = Patience(),
) -> tuple[set[str], int]:
    """Every suite of `offered` that the server accepts under `protocol`, by elimination, and the
    number of handshakes it took."""
    left, accepted, handshakes = list(offered), set[str](), 0
    while left:
        handshakes += 1
        negotiated = handshake(address, ca, cert, protocol, left, patience)
        if negotiated is None or negotiated not in left:
            break
        accepted.add(negotiated)
        left.remove(negotiated)
    return accepted, handshakes


def scan(
    address: str, ca: Path, cert: Path | None = None, workers: int = 4, patience: Patience = Patience()
) -> Offer:
    offer = Offer()
    with ThreadPoolExecutor(workers) as pool:
        versions = list(pool.map(lambda p: (p, handshake(address, ca, cert, p, None, patience)), PROTOCOLS))
        offered = {"TLSv1.2": tls12_suites(), "TLSv1.3": TLS13_SUITES}
        suites = list(
            pool.map(lambda p: (p, accepted_suites(address, ca, cert, p, offered[p], patience)), offered)
        )
    offer.handshakes = len(versions)
    offer.protocols = {protocol for protocol, negotiated in versions if negotiated is not None}
    for protocol, (accepted, handshakes) in suites:
        offer.handshakes += handshakes
        if accepted:
            offer.suites[protocol] = accepted
    return offer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address", help="HOST:PORT")
    parser.add_argument("--ca", type=Path, required=True)
    parser.add_argument("--cert", type=Path, help="client key and certificate (PEM), for mTLS listeners")
    args = parser.parse_args()
    offer = scan(args.address, args.ca, args.cert)
    print("protocols:", ", ".join(sorted(offer.protocols)) or "none")
    for protocol, suites in sorted(offer.suites.items()):
        print(f"{protocol}: {', '.join(sorted(suites))}")
    print(f"({offer.handshakes} handshakes)")
    weak = offer.weaker_than_aead()
    print("weaker than TLS 1.2/1.3 with forward-secret AEAD:", ", ".join(weak) if weak else "nothing")
    raise SystemExit(1 if weak else 0)


if __name__ == "__main__":
    main()
