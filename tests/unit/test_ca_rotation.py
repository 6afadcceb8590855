"""The CA rotation's controller side (roles/pki/tasks/rotate.yml), on a real PKI the pki role
makes: each step's files and trust bundle, the order it enforces, and the refusal to retire a CA
that a certificate still depends on. The nodes' side runs in the e2e suite (scenario g, ops)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from pikit_testkit.certs import certificate, new_key, pem

from tests.conftest import run_on_controller

# A day-2 procedure of several minutes of ansible-playbook: make test-ops runs it (and scenario g
# of the e2e suite, the nodes' side).
pytestmark = pytest.mark.ops

PLAY = """
- name: One rotation step, then the bundle every node would get
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Rotate
      ansible.builtin.include_role:
        name: pki
        tasks_from: rotate
      when: pki_rotate_step != 'none'
    - name: The CA and the trust bundle, as site.yml's first certificate makes them
      ansible.builtin.include_role:
        name: pki
"""


def step(tmp_path: Path, name: str) -> tuple[int, str]:
    playbook = tmp_path / "rotate.yml"
    playbook.write_text(PLAY)
    proc = run_on_controller(playbook, f"pikit_state_dir={tmp_path} pki_rotate_step={name}")
    return proc.returncode, proc.stdout + proc.stderr


def subject(path: Path) -> str:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def trusted(pki: Path) -> list[str]:
    text = (pki / "trust.crt").read_bytes()
    marker = b"-----BEGIN CERTIFICATE-----"
    certs = [x509.load_pem_x509_certificate(marker + block) for block in text.split(marker)[1:]]
    return [cert.subject.rfc4514_string() for cert in certs]


def issue(pki: Path, name: str) -> None:
    """A node certificate signed by the controller's current CA, as sign.yml would leave it."""
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    cert = certificate("pi-1", new_key(), subject(pki / "ca.crt"), ca_key)
    (pki / "issued" / name).write_bytes(pem(None, cert))


@pytest.mark.timeout(600)  # 147 s on CI; 300 s ran out on a loaded 2-core machine
def test_stage_promote_retire_keep_trust_ahead_of_issuance(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    code, out = step(tmp_path, "none")
    assert code == 0, out[-3000:]
    first = subject(pki / "ca.crt")
    assert trusted(pki) == [f"CN={first}"]
    issue(pki, "pi-1-kafka.crt")

    code, out = step(tmp_path, "promote")
    assert code != 0 and "no CA staged" in out, "promote before stage is refused"

    code, out = step(tmp_path, "stage")
    assert code == 0, out[-3000:]
    staged = subject(pki / "ca-next" / "ca.crt")
    assert staged.startswith(first + " ") and trusted(pki) == [f"CN={first}", f"CN={staged}"]
    assert step(tmp_path, "stage")[0] == 0 and subject(pki / "ca-next" / "ca.crt") == staged, "staged once"

    code, out = step(tmp_path, "promote")
    assert code == 0, out[-3000:]
    assert subject(pki / "ca.crt") == staged and subject(pki / "ca-retiring" / "ca.crt") == first
    assert trusted(pki) == [f"CN={staged}", f"CN={first}"], "the old CA stays trusted"
    assert oct((pki / "ca-retiring" / "ca.key").stat().st_mode & 0o777) == "0o600"
    assert step(tmp_path, "promote")[0] == 0 and subject(pki / "ca.crt") == staged, "promoted once"

    code, out = step(tmp_path, "retire")
    assert code != 0 and "pi-1-kafka.crt" in out, "retiring a CA a certificate still depends on is refused"
    assert trusted(pki) == [f"CN={staged}", f"CN={first}"]

    issue(pki, "pi-1-kafka.crt")  # what the promote step's site.yml does for every certificate
    code, out = step(tmp_path, "retire")
    assert code == 0, out[-3000:]
    assert trusted(pki) == [f"CN={staged}"] and not (pki / "ca-retiring").exists()
    (archived,) = pki.glob("retired-*")
    assert subject(archived / "ca.crt") == first
    assert step(tmp_path, "retire")[0] == 0 and trusted(pki) == [f"CN={staged}"], "retired once"
