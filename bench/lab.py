"""The demo's lab as the benches reach it from this machine: its groups, the brokers over mTLS,
the driver Pis' disks that hold the Spark apps' scratch checkpoints and event logs, and the
devices' keys."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer
from pikit_contract import signing
from pikit_dev.lab import spec_from_inventory
from pikit_dev.lab_image import lab_home
from pikit_testkit.nemesis import SiteNodes

from pikit import REPO
from pikit.site import Site
from pikit.site_model import driver_pis
from pikit.topic import mtls_client

INVENTORY = REPO / "inventory/lab"
# The site's topics the benches read and write, by the name of their setting (pikit_<kind>_topic).
TOPIC_KINDS = ("readings", "aggregates", "latest", "alerts", "dead_letter", "late")
# The apps' Spark defaults on the master (spark_conf_dir): spark_app_java_options among them.
SPARK_DEFAULTS = "/etc/spark/spark-defaults.conf"


@dataclass(frozen=True)
class Lab:
    name: str
    groups: dict[str, list[str]]  # inventory group -> its hosts
    client: dict[str, Any]  # kafka-python's mTLS settings for the lab's brokers
    state: Path  # the controller's state of this lab (PKI, signing secret)
    topics: dict[str, str]  # TOPIC_KINDS -> the topic's name on this site

    @property
    def master(self) -> str:
        return self.groups["spark_master"][0]

    @property
    def drivers(self) -> list[str]:
        """The driver Pis (spark_driver): each app is active on one of them and stands by on the
        others (pikit_spark/leadership.py: the holder keeps it across restarts, so which one holds
        an app is found, not assumed)."""
        return driver_pis(self.groups)

    @property
    def driver(self) -> str:
        """The first driver Pi: where the apps run after a cold start of the site."""
        return self.drivers[0]

    def spark_data_of(self, node: str) -> Path:
        """spark_data_dir on a driver Pi's own disk, as this machine sees it (`podman mount`, as
        root): its drivers' scratch checkpoints and event logs."""
        mount = subprocess.run(
            ["podman", "mount", node], capture_output=True, text=True, check=True
        ).stdout.strip()
        return Path(mount) / "srv/pikit/spark"

    def driver_of(self, app: str) -> str:
        """The driver Pi where `app` is active: the one whose driver committed last (a standby
        commits nothing), by the e2e suite's rule."""
        return SiteNodes((), (), self.master, (), (app,), drivers=tuple(self.drivers)).driver_of(app)

    def scratch_of(self, node: str, app: str) -> Path:
        """The app's scratch checkpoint on a driver Pi's disk."""
        return self.spark_data_of(node) / "scratch" / app

    def device_keys(self, devices: list[str]) -> dict[str, bytes]:
        """Each device's signing key, derived from the site's secret as the lab's agents derive theirs."""
        secret = signing.read_site_secret(str(self.state / "device-signing-secret"))
        return {device: signing.device_key(secret, device) for device in devices}

    def committed(self, *topics: str) -> KafkaConsumer:
        """A consumer of what is committed to these topics from now on (read_committed, latest)."""
        return KafkaConsumer(
            *topics, **self.client, auto_offset_reset="latest", isolation_level="read_committed"
        )


def find() -> Lab:
    """The lab that `make demo` converged, from its inventory; fails when there is none."""
    site, name = Site.load(INVENTORY), spec_from_inventory(INVENTORY).name
    state = lab_home() / "state" / name
    brokers = site.endpoints("kafka-client", site.hosts("kafka_broker"))
    topics = {kind: str(site.setting(f"pikit_{kind}_topic")) for kind in TOPIC_KINDS}
    return Lab(name, site.groups, mtls_client(brokers, state / "pki"), state, topics)
