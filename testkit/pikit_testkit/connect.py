"""A real Kafka Connect worker on loopback, from the kit's Kafka release, running the connect role's
own configuration template: for the integration tests of the role's module and filters."""

from __future__ import annotations

import signal
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import jinja2
from ansible_collections.pikit.cluster.plugins.modules import kafka_connectors

from pikit import REPO
from pikit_testkit.broker import LocalBroker, free_port

GROUP = "pikit-connect"
TEMPLATE = REPO / "roles/connect/templates/connect-distributed.properties.j2"


class LocalWorker:
    """One distributed worker of group GROUP, mTLS to `broker` with the PEM bundle
    `<tls_dir>/kafka-connect.pem` and the CA `<tls_dir>/ca.crt`, its REST API at `url`."""

    def __init__(self, work: Path, broker: LocalBroker, tls_dir: Path, jvm: list[str] | None = None) -> None:
        self.work = work
        self.broker = broker
        self.home = broker.home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.props = work / "connect-distributed.properties"
        self.props.write_text(
            jinja2.Template(TEMPLATE.read_text()).render(
                ansible_managed="test",
                pikit_connect_group_id=GROUP,
                pikit_connect_principal="connect",
                _kafka_bootstrap=[broker.address],
                _connect_replicas=1,
                connect_exactly_once_source=True,
                connect_address="127.0.0.1",
                connect_rest_port=self.port,
                connect_tls_dir=str(tls_dir),
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None
        # A test's worker lives a minute: C1 alone; a benchmark passes the role's own options.
        self.jvm = jvm if jvm is not None else ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]

    def start(self, timeout: float = 120) -> None:
        """Start the worker and wait until it serves (the role's own health check)."""
        java = ["java", *self.jvm, "-cp", f"{self.home}/libs/*"]
        with (self.work / "connect.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [*java, "org.apache.kafka.connect.cli.ConnectDistributed", str(self.props)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        kafka_connectors.run(
            kafka_connectors.params_with_defaults(
                action="health", urls=[self.url], wait_timeout=int(timeout)
            ),
            False,
        )

    def kill(self) -> None:
        """kill -9, as a power cut or the OOM killer would."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def stop(self, grace: float = 60) -> None:
        """SIGTERM, and after `grace` seconds SIGKILL, as systemd's TimeoutStopSec does to the
        role's unit. A worker that outlives its grace first dumps its threads into connect.log
        (SIGQUIT), so the reason it hung is kept."""
        proc = self.proc
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=grace)
            self.proc = None
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGQUIT)
            time.sleep(2)
            self.kill()
            log = self.work / "connect.log"
            warnings.warn(
                f"Connect worker alive {grace:.0f} s after SIGTERM, killed; its threads: {log}", stacklevel=2
            )

    def reconcile(
        self, connectors: list[dict[str, Any]], check: bool = False, **given: Any
    ) -> dict[str, Any]:
        """The role's reconcile against this worker; a test that expects a failure passes a settle
        longer than the failure takes, the others settle for 5 s (the role: 30)."""
        params = kafka_connectors.params_with_defaults(
            urls=[self.url], connectors=connectors, wait_timeout=90, **{"settle_seconds": 5, **given}
        )
        result: dict[str, Any] = kafka_connectors.run(params, check)
        return result

    def configs(self) -> dict[str, dict[str, str]]:
        configs: dict[str, dict[str, str]] = kafka_connectors.Workers(
            [self.url], time.monotonic() + 30
        ).configs()
        return configs


class OneWorkerSite:
    """What `pikit status` asks of a site about its workers."""

    def __init__(self, url: str) -> None:
        self.endpoint = url.removeprefix("http://")

    def hosts(self, group: str) -> list[str]:
        return ["w1"] if group == "kafka_connect" else []

    def endpoints(self, service: str, hosts: list[str]) -> list[str]:
        assert service == "connect-rest" and hosts == ["w1"]
        return [self.endpoint]
