"""Real KRaft brokers started from the artifact cache, for the integration tests.

One combined broker/controller on loopback from the cached tarball, with the
StandardAuthorizer (the anonymous PLAINTEXT user is a super user, so ACLs can be
managed and checked). A broker can be stopped and started again on the same port
and storage, to stage outages.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cached_kafka() -> Path:
    manifest = json.loads((REPO / "artifacts/MANIFEST.json").read_text())
    tarballs: list[str] = [n for n in manifest["files"] if n.startswith("kafka/") and n.endswith(".tgz")]
    assert tarballs, "run `make artifacts` first"
    return REPO / "artifacts" / tarballs[0]


class LocalBroker:
    def __init__(self, work: Path) -> None:
        self.work = work
        with tarfile.open(cached_kafka()) as tar:
            tar.extractall(work, filter="data")
        self.home = next(p for p in work.iterdir() if p.is_dir())
        self.port, controller = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.props = work / "server.properties"
        self.props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{controller}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                    f"log.dirs={work / 'data'}",
                    "offsets.topic.replication.factor=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "super.users=User:ANONYMOUS",
                    "",
                ]
            )
        )
        self.java = ["java", "-Xmx384m", "-cp", f"{self.home}/libs/*"]
        subprocess.run(
            [*self.java, "kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()), "-c", self.props],
            check=True,
            capture_output=True,
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90) -> None:
        log = (self.work / "kafka.log").open("ab")
        self.proc = subprocess.Popen(
            [*self.java, "kafka.Kafka", self.props], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.work / "kafka.log").read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"broker did not open its port in {timeout:.0f} s")

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=60) in (0, 143), "broker did not stop cleanly"
        self.proc = None


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    local = LocalBroker(tmp_path_factory.mktemp("kafka"))
    local.start()
    yield local.address
    local.stop()


@pytest.fixture()
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of the test's own, which it may stop and start."""
    local = LocalBroker(tmp_path_factory.mktemp("kafka-own"))
    local.start()
    yield local
    if local.proc is not None:
        local.stop()
