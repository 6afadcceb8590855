"""Certificate renewal by age (roles/pki, pki_renew_before_days) on a real PKI the pki role
makes on the controller: a certificate is issued again once it is inside the renewal window,
and left alone before. The nodes' side (every service restarted on its new certificate, under
load) runs in the e2e suite (scenario f, ops)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from tests.conftest import run_on_controller

PLAY = """
- name: The admin client's certificate, as the kafka role asks for it
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Issue or renew
      ansible.builtin.include_role:
        name: pki
        tasks_from: client_cert
      vars:
        pki_cert_common_name: admin
"""


def converge(tmp_path: Path, valid_days: int, renew_before_days: int) -> str:
    playbook = tmp_path / "renew.yml"
    playbook.write_text(PLAY)
    proc = run_on_controller(
        playbook,
        f"pikit_state_dir={tmp_path} pki_cert_valid_days={valid_days}",
        f"pki_renew_before_days={renew_before_days}",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc.stdout


def serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


@pytest.mark.timeout(300)
def test_a_certificate_is_renewed_inside_its_window_and_left_alone_before(tmp_path: Path) -> None:
    cert = tmp_path / "pki/clients/admin.crt"
    converge(tmp_path, valid_days=20, renew_before_days=10)
    first = serial(cert)
    bundle = (tmp_path / "pki/clients/admin.pem").read_bytes()

    # 20 days left, a 10-day window: not yet.
    converge(tmp_path, valid_days=20, renew_before_days=10)
    assert serial(cert) == first, "renewed outside its window"

    # The same certificate seen by a 30-day window (it has aged into it): issued again, and the
    # bundle the services read follows.
    converge(tmp_path, valid_days=365, renew_before_days=30)
    renewed = x509.load_pem_x509_certificate(cert.read_bytes())
    assert renewed.serial_number != first, "not renewed inside its window"
    assert (renewed.not_valid_after_utc - renewed.not_valid_before_utc).days >= 364
    assert (tmp_path / "pki/clients/admin.pem").read_bytes() != bundle

    # And left alone again once it is far from expiry.
    converge(tmp_path, valid_days=365, renew_before_days=30)
    assert serial(cert) == renewed.serial_number
