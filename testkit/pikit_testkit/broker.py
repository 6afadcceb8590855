"""A real Kafka broker on loopback from the artifact cache, for tests and benchmarks."""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

from pikit import REPO, role_default

# Where free_port looks: this many ports just below the kernel's ephemeral range.
PORTS_BELOW_EPHEMERAL = 12_000


def free_port() -> int:
    """A loopback port nothing is bound to, below the kernel's ephemeral range. A port the kernel
    hands out for bind(0) comes from that range, where any client's next outgoing connection may
    take it before the broker binds it: a fresh-clone make test lost test_connect's broker that way
    (BindException, 2026-12-04)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        port = random.randrange(max(1024, low - PORTS_BELOW_EPHEMERAL), low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or lingering in TIME_WAIT
            return port
    raise RuntimeError(f"no free loopback port below {low} after 100 tries")


def cached_kafka() -> Path:
    """The kit's Kafka release in the cache `make artifacts` filled (which may hold others too, such
    as the release the upgrade scenario starts from)."""
    scala, version = role_default("kafka", "kafka_scala_version"), role_default("kafka", "kafka_version")
    name = f"kafka/kafka_{scala}-{version}.tgz"
    manifest = json.loads((REPO / "artifacts/MANIFEST.json").read_text())
    assert name in manifest["files"], f"{name} is not in the artifact cache: run `make artifacts` first"
    return REPO / "artifacts" / name


def cached_jmx_exporter() -> Path:
    """The JMX exporter javaagent the kafka role installs, from the artifact cache."""
    rel = f"metrics/jmx_prometheus_javaagent-{role_default('kafka', 'kafka_jmx_exporter_version')}.jar"
    manifest = json.loads((REPO / "artifacts/MANIFEST.json").read_text())
    assert rel in manifest["files"], f"{rel} is not in the artifact cache: run `make artifacts` first"
    return REPO / "artifacts" / rel


class LocalBroker:
    """One combined KRaft node on loopback; with `tls` (server bundle, CA) an mTLS listener, and
    with `sasl` as well a SASL_SSL listener taking SCRAM-SHA-512 (`sasl_address`). With `metrics`
    it runs the kafka role's JMX exporter and rules, served at `metrics_url`. With `cn_principals`,
    a client's principal is its certificate's CN, as the kafka role maps it (`User:bench` is the super
    user then, not `User:CN=bench`). A `short_lived`
    broker (one test's) runs on C1 alone with one GC thread: C2 spent a large share of such a
    JVM's CPU compiling code that a broker of a minute never repays. Benchmarks keep the defaults."""

    def __init__(
        self,
        work: Path,
        tls: tuple[Path, Path] | None = None,
        sasl: bool = False,
        metrics: bool = False,
        short_lived: bool = False,
        cn_principals: bool = False,
    ) -> None:
        assert tls or not sasl, "the SASL_SSL listener needs tls"
        self.work = work
        with tarfile.open(cached_kafka()) as tar:
            tar.extractall(work, filter="data")
        self.home = next(p for p in work.iterdir() if p.is_dir())
        self.port, controller = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.sasl_address = f"127.0.0.1:{free_port()}" if sasl else ""
        self.props = work / "server.properties"
        client = "SSL" if tls else "PLAINTEXT"
        tls_lines = (
            [
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={tls[0]}",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={tls[1]}",
                "ssl.client.auth=required",
            ]
            if tls
            else []
        )
        sasl_listener = f",SASL://{self.sasl_address}" if sasl else ""
        sasl_protocol = ",SASL:SASL_SSL" if sasl else ""
        sasl_lines = (
            [
                "listener.name.sasl.ssl.client.auth=none",
                "listener.name.sasl.sasl.enabled.mechanisms=SCRAM-SHA-512",
                "listener.name.sasl.scram-sha-512.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            ]
            if sasl
            else []
        )
        self.props.write_text(
            "\n".join(
                [
                    *tls_lines,
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{controller}",
                    f"listeners=CLIENT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}{sasl_listener}",
                    f"advertised.listeners=CLIENT://127.0.0.1:{self.port}{sasl_listener}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=CLIENT",
                    f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,CLIENT:{client}{sasl_protocol}",
                    *sasl_lines,
                    f"log.dirs={work / 'data'}",
                    "offsets.topic.replication.factor=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    # A group's first rebalance at once: Kafka's 3 s wait is for a fleet of consumers.
                    "group.initial.rebalance.delay.ms=0",
                    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "super.users=User:ANONYMOUS;User:CN=bench;User:bench",
                    *(
                        ["ssl.principal.mapping.rules=RULE:^CN=([^,]+).*$/$1/,DEFAULT"]
                        if cn_principals
                        else []
                    ),
                    "",
                ]
            )
        )
        # C1 alone and one GC thread: for JVMs that live seconds to minutes (every tool run).
        quick = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
        launcher, classpath = ["java", "-Xmx384m"], ["-cp", f"{self.home}/libs/*"]
        self.java = [*launcher, *(quick if short_lived else []), *classpath]
        self.metrics_url, self.agent = "", []
        if metrics:
            port = free_port()
            rules = REPO / "roles/kafka/files/jmx-exporter.yml"
            self.metrics_url = f"http://127.0.0.1:{port}/metrics"
            self.agent = [f"-javaagent:{cached_jmx_exporter()}=127.0.0.1:{port}:{rules}"]
        storage_tool = [*launcher, *quick, *classpath, "kafka.tools.StorageTool"]
        subprocess.run(
            [*storage_tool, "format", "-t", str(uuid.uuid4()), "-c", self.props],
            check=True,
            capture_output=True,
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90) -> None:
        log = (self.work / "kafka.log").open("ab")
        self.proc = subprocess.Popen(
            [self.java[0], *self.agent, *self.java[1:], "kafka.Kafka", self.props],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.work / "kafka.log").read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"broker did not open its port in {timeout:.0f} s")

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=60) in (0, 143), "broker did not stop cleanly"
        self.proc = None


COMPACTED = {"cleanup.policy": "compact"}


def new_topic(
    address: str, prefix: str = "out", partitions: int = 2, configs: dict[str, str] | None = None
) -> str:
    """A topic of its own (a random name after `prefix`) on the broker at `address`, with the
    topic `configs` given (e.g. COMPACTED)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=[address])
    try:
        admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, topic_configs=configs or {})]
        )
    finally:
        admin.close()
    return name
