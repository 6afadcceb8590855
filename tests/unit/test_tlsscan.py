"""The TLS scanner against `openssl s_server` listeners whose offer is known."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pikit_testkit.broker import free_port
from pikit_testkit.certs import certificate, new_key, pem

from pikit.tlsscan import NoAnswerError, Patience, scan


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("tls")
    ca_key, key = new_key(), new_key()
    (work / "ca.crt").write_bytes(pem(None, certificate("scan CA", ca_key, "scan CA", ca_key, ca=True)))
    leaf = certificate("localhost", key, "scan CA", ca_key, ip="127.0.0.1")
    (work / "server.pem").write_bytes(pem(key, leaf))
    return work / "ca.crt", work / "server.pem"


def server(tls: tuple[Path, Path], *options: str) -> Iterator[str]:
    port = free_port()
    cmd = ["openssl", "s_server", "-accept", str(port), "-cert", str(tls[1]), "-key", str(tls[1]), *options]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def aead_only(tls: tuple[Path, Path]) -> Iterator[str]:
    yield from server(
        tls,
        "-cipher",
        "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-CHACHA20-POLY1305",
        "-ciphersuites",
        "TLS_AES_256_GCM_SHA384",
    )


@pytest.fixture
def with_cbc(tls: tuple[Path, Path]) -> Iterator[str]:
    yield from server(tls, "-no_tls1_3", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-SHA")


def test_an_aead_only_listener_passes(aead_only: str, tls: tuple[Path, Path]) -> None:
    offer = scan(aead_only, tls[0], workers=1)
    assert offer.protocols == {"TLSv1.2", "TLSv1.3"}
    assert offer.suites == {
        "TLSv1.2": {"ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305"},
        "TLSv1.3": {"TLS_AES_256_GCM_SHA384"},
    }
    assert offer.weaker_than_aead() == []
    # 4 versions, then each accepted suite and one refusal per version: not one per known suite.
    assert offer.handshakes == 4 + (2 + 1) + (1 + 1)


def test_a_cbc_suite_is_found(with_cbc: str, tls: tuple[Path, Path]) -> None:
    offer = scan(with_cbc, tls[0], workers=1)
    assert offer.protocols == {"TLSv1.2"}
    assert offer.weaker_than_aead() == ["TLSv1.2 ECDHE-RSA-AES128-SHA"]
    assert offer.suites == {"TLSv1.2": {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA"}}


def test_a_listener_that_never_answers_is_no_answer_not_a_refusal(tls: tuple[Path, Path]) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # takes the connection, says nothing
    try:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(
            NoAnswerError, match=r"no answer to a TLSv1[.0-9]* handshake in 2 tries of 0\.5 s"
        ):
            scan(address, tls[0], workers=1, patience=Patience(timeout=0.5, tries=2))
        assert time.monotonic() - started < 10
    finally:
        silent.close()
