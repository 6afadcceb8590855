"""A real KRaft broker started from the artifact cache, shared by the integration tests.

Formats storage and starts one combined broker/controller on loopback from the
cached tarball, with the StandardAuthorizer (the anonymous PLAINTEXT user is a
super user, so ACLs can be managed and checked).
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cached_kafka() -> Path:
    manifest = json.loads((REPO / "artifacts/MANIFEST.json").read_text())
    tarballs: list[str] = [
        name for name in manifest["files"] if name.startswith("kafka/") and name.endswith(".tgz")
    ]
    assert tarballs, "run `make artifacts` first"
    return REPO / "artifacts" / tarballs[0]


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("kafka")
    with tarfile.open(_cached_kafka()) as tar:
        tar.extractall(work, filter="data")
    home = next(work.iterdir())
    client, controller = _free_port(), _free_port()
    props = work / "server.properties"
    props.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{controller}",
                f"listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{client}",
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
    java = ["java", "-Xmx384m", "-cp", f"{home}/libs/*"]
    subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()), "-c", props],
        check=True,
        capture_output=True,
    )
    log = (work / "kafka.log").open("wb")
    proc = subprocess.Popen([*java, "kafka.Kafka", props], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, (work / "kafka.log").read_text()[-3000:]
        try:
            socket.create_connection(("127.0.0.1", client), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    else:
        pytest.fail("broker did not open its port in 90 s")
    yield f"127.0.0.1:{client}"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) in (0, 143), "broker did not stop cleanly"
