"""A mirroring site's identity for its core, exchanged as a user does it (roles/connect/README.md):
the site's worker makes its key and leaves a request (roles/connect, tasks/mirror.yml); the
core's controller signs it with the core's own CA (roles/pki, tasks/site_cert.yml, which
playbooks/mirror-admit.yml runs); the worker takes the certificate. Both sides run on this
controller, the worker as localhost. The brokers' side (the core's ACLs, the mirror itself) runs
in tests/integration/test_mirror.py."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pikit_testkit.certs import new_key
from pikit_testkit.molecule_lab import changed

from tests.conftest import run_on_controller

# A day-2 procedure of several minutes of ansible-playbook: make test-ops runs it, and connect/mirror
# exchanges the identity on two labs.
pytestmark = pytest.mark.ops

SITE_SIDE = """
- name: The site's worker, for its core
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: The site's identity for the core
      ansible.builtin.include_role:
        name: connect
        tasks_from: mirror
        public: true
    - name: What the mirror waits for
      ansible.builtin.debug:
        msg: "PENDING={{ _connect_mirror_pending | to_json }}"
    - name: Whether the mirror's connectors are to start anew
      ansible.builtin.debug:
        msg: "RENEWED={{ _connect_mirror_renewed | default(false) | bool }}"
"""

CORE_SIDE = """
- name: The core's controller
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Certify the site's workers
      ansible.builtin.include_role:
        name: pki
        tasks_from: site_cert
"""


def _site(tmp_path: Path) -> tuple[int, str]:
    playbook = tmp_path / "site.yml"
    playbook.write_text(SITE_SIDE)
    user = getpass.getuser()
    variables = {
        "pikit_state_dir": str(tmp_path / "site"),
        "connect_mirror": {"site": "greenhouse", "core_bootstrap": ["core-1:9092"]},
        "connect_tls_dir": str(tmp_path / "worker"),
        "connect_user": user,
        "_connect_hosts": ["localhost"],
    }
    proc = run_on_controller(playbook, json.dumps(variables))
    return proc.returncode, proc.stdout + proc.stderr


def _core(tmp_path: Path, requests: Path) -> tuple[int, str]:
    playbook = tmp_path / "core.yml"
    playbook.write_text(CORE_SIDE)
    variables = {
        "pikit_state_dir": str(tmp_path / "core"),
        "pki_site_dir": str(requests),
        "pki_site_principal": "site.greenhouse",
    }
    proc = run_on_controller(playbook, json.dumps(variables))
    return proc.returncode, proc.stdout + proc.stderr


def _pending(out: str) -> list[str]:
    line = next(line for line in out.splitlines() if "PENDING=" in line)
    return list(json.loads(line.split("PENDING=", 1)[1].rstrip('"').replace('\\"', '"')))


def _renewed(out: str) -> bool:
    line = next(line for line in out.splitlines() if "RENEWED=" in line)
    return line.split("RENEWED=", 1)[1].startswith("True")


def test_the_site_asks_the_core_signs_its_principal_only_and_the_worker_takes_its_certificate(
    tmp_path: Path,
) -> None:
    requests = tmp_path / "site" / "mirror" / "greenhouse"
    worker = tmp_path / "worker"
    worker.mkdir()

    code, out = _site(tmp_path)
    assert code == 0, out[-3000:]
    assert _pending(out) == ["localhost"], "no certificate of the core yet"
    assert oct((worker / "core.key").stat().st_mode & 0o777) == "0o600"
    request = x509.load_pem_x509_csr((requests / "localhost.csr").read_bytes())
    assert request.subject.rfc4514_string() == "CN=site.greenhouse"
    assert not (worker / "core.crt").exists()

    # A request for another site's principal, slipped into the directory: nothing is signed.
    intruder = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "site.school")]))
        .sign(new_key(), hashes.SHA256())
    )
    (requests / "intruder.csr").write_bytes(intruder.public_bytes(serialization.Encoding.PEM))
    code, out = _core(tmp_path, requests)
    assert code != 0 and "may only be site.greenhouse" in out, out[-3000:]
    assert not list(requests.glob("*.crt")), "nothing signed while one request is foreign"
    (requests / "intruder.csr").unlink()

    code, out = _core(tmp_path, requests)
    assert code == 0, out[-3000:]
    core_ca = x509.load_pem_x509_certificate((tmp_path / "core" / "pki" / "ca.crt").read_bytes())
    signed = x509.load_pem_x509_certificate((requests / "localhost.crt").read_bytes())
    signed.verify_directly_issued_by(core_ca)
    assert signed.public_key() == request.public_key(), "the worker's key, never seen by the core"
    usage = signed.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert (requests / "core-ca.crt").read_bytes() == (tmp_path / "core" / "pki" / "trust.crt").read_bytes()
    code, out = _core(tmp_path, requests)
    assert code == 0 and changed(out) == 0, "signed once"

    code, out = _site(tmp_path)
    assert code == 0, out[-3000:]
    assert _pending(out) == []
    bundle = worker / "core.pem"
    assert oct(bundle.stat().st_mode & 0o777) == "0o600"
    key, cert = (worker / "core.key").read_bytes(), (requests / "localhost.crt").read_bytes()
    assert bundle.read_bytes() == key + cert
    assert (worker / "core-ca.crt").read_bytes() == (requests / "core-ca.crt").read_bytes()
    assert _renewed(out), "the identity for the core is new: the reconcile restarts the mirror"
    code, out = _site(tmp_path)
    assert code == 0 and changed(out) == 0 and _pending(out) == [], "a second run changes nothing"
    assert not _renewed(out)

    # Day 2: the core signs the same key anew (renewal); the worker's next run takes it and has the
    # mirror restarted, for its clients read the bundle only when they start.
    (requests / "localhost.crt").unlink()
    code, out = _core(tmp_path, requests)
    assert code == 0, out[-3000:]
    assert (requests / "localhost.crt").read_bytes() != cert
    code, out = _site(tmp_path)
    assert code == 0 and _renewed(out), out[-3000:]
    assert bundle.read_bytes() == key + (requests / "localhost.crt").read_bytes()
    code, out = _site(tmp_path)
    assert code == 0 and changed(out) == 0 and not _renewed(out)
