"""Whether a certificate issued before on the controller must be issued again: it expires within
the renewal window, or a CA other than the signing one issued it (after a rotation's promote
step). False when there is none yet: signing makes it then anyway.

    force: "{{ lookup('pki_reissue_due', cert_path, ca_path, renew_before_days=30) }}"

One lookup in place of three controller tasks (the CA's subject, the certificate's presence, its
remaining life) for each certificate of each run.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from cryptography import x509


def reissue_due(cert_path: Path, ca_path: Path, renew_before_days: int, now: datetime.datetime) -> bool:
    if not cert_path.exists():
        return False
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
    inside_window = cert.not_valid_after_utc - now <= datetime.timedelta(days=renew_before_days)
    return inside_window or cert.issuer != ca.subject


class LookupModule(LookupBase):  # type: ignore[misc]  # ansible ships no type information
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[bool]:
        if len(terms) != 2:
            raise AnsibleLookupError("pki_reissue_due takes the certificate's path and the signing CA's path")
        cert_path, ca_path = (Path(str(term)) for term in terms)
        days = int(kwargs.get("renew_before_days", 0))
        return [reissue_due(cert_path, ca_path, days, datetime.datetime.now(datetime.UTC))]
