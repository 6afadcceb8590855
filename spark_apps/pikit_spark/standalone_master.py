"""What a driver settles with the standalone master beside its queries: the applications its
predecessors left there, and its own application's registration.

**Its predecessors' applications.** A driver whose Pi dies says nothing to the master. The master
keeps its application, and the cores of its executors, until the TCP connection to the dead
driver fails, minutes later. Its executors end themselves after four missed heartbeats (20 s), and
the master starts new ones for it on the same cores, which wait for the dead driver in their turn.
On the lab, the standby that took sensor_aggregates over got no executor at all for 100 s: the one
surviving worker's cores were all held by the dead driver's application and the other app. The
driver that won the app's election, and whose producer fenced every earlier one, is the only one
that can write the app's outputs: any other application of the same name is a predecessor's. So it
unregisters them, as their own drivers would have on a clean stop; the master then ends their
executors and gives the cores to the apps waiting for them. A predecessor that is alive after all
(cut off, then back) hears from the master that its application was removed, and its driver ends;
systemd starts it again as a standby.

**Its own registration.** A running application needs the master only for new executors, and goes
on while the master is away. But a master that comes back without it, re-flashed onto a new SD
card or past its recovery's wait, kills its executors as their workers register, and Spark's
driver waits for a master that will never call it back. So the driver watches the live master's
page: when the master answers and lists the application no more, three looks in a row, the driver
exits (EXIT_FORGOTTEN), and systemd starts it again; it registers anew and resumes from Kafka.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from pyspark.sql import SparkSession

from pikit_spark.common import LOG

# The master may list a predecessor only after its own recovery; a minute covers the master's Pi
# lost in the same moment as the driver's (spark.worker.timeout and a restart).
LOOK_FOR_S = 60.0
LOOK_EVERY_S = 5.0
MASTER_PAGE_TIMEOUT_S = 5.0
# A master answers its page within a second; one in recovery lists its applications again once
# their drivers answer it (seconds), and is RECOVERING meanwhile, which says nothing.
WATCH_EVERY_S = 10.0
FORGOTTEN_AFTER = 3
EXIT_FORGOTTEN = 75  # EX_TEMPFAIL: start again (the unit's Restart=always)
MASTER_ENDPOINT = "Master"  # org.apache.spark.deploy.master.Master.ENDPOINT_NAME


def predecessors(master_state: dict[str, Any], name: str, mine: str) -> list[str]:
    """The ids of the master's applications named `name` other than `mine`."""
    apps = master_state.get("activeapps", [])  # the page lists waiting applications here too
    return sorted({app["id"] for app in apps if app.get("name") == name and app.get("id") != mine})


def listed(master_state: dict[str, Any]) -> set[str]:
    """The ids of the master's applications."""
    return {app["id"] for app in master_state.get("activeapps", [])}


def master_pages(master_url: str, ui_port: int) -> list[str]:
    """The JSON page of each master of `spark://host:port[,host:port...]`."""
    addresses = master_url.removeprefix("spark://").split(",")
    return [f"http://{address.rpartition(':')[0]}:{ui_port}/json/" for address in addresses if address]


def _read(page: str) -> dict[str, Any]:
    with urllib.request.urlopen(page, timeout=MASTER_PAGE_TIMEOUT_S) as response:
        state: dict[str, Any] = json.load(response)
        return state


def unregister_at(spark: SparkSession) -> Callable[[str], None]:
    """Unregisters an application at the app's master over Spark's RPC, which the cluster's
    shared secret authenticates (the message a driver sends on a clean stop)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    master_url = str(spark.sparkContext.master)
    env = jvm.org.apache.spark.SparkEnv.get()
    message = getattr(jvm.org.apache.spark.deploy, "DeployMessages$UnregisterApplication")

    def unregister(app_id: str) -> None:
        for address in master_url.removeprefix("spark://").split(","):
            rpc_address = jvm.org.apache.spark.rpc.RpcAddress.fromSparkURL(f"spark://{address}")
            env.rpcEnv().setupEndpointRef(rpc_address, MASTER_ENDPOINT).send(message(app_id))

    return unregister


def evict(
    name: str,
    mine: str,
    pages: Iterable[str],
    unregister: Callable[[str], None],
    read: Callable[[str], dict[str, Any]] = _read,
    look_for: float = LOOK_FOR_S,
    every: float = LOOK_EVERY_S,
) -> list[str]:
    """Unregister every predecessor the masters list, looking until they list this application
    (`mine`) and no other of its name, or for `look_for` seconds. The ids unregistered."""
    evicted: list[str] = []
    deadline = time.monotonic() + look_for
    while True:
        settled = False
        for page in pages:
            try:
                state = read(page)
            except (OSError, ValueError) as exc:
                LOG.info("the master's page %s: %s", page, exc)
                continue
            found = [app_id for app_id in predecessors(state, name, mine) if app_id not in evicted]
            for app_id in found:
                LOG.warning(
                    "%s: unregistering %s, an earlier driver's application, at the master", name, app_id
                )
                unregister(app_id)
                evicted.append(app_id)
            settled = settled or (mine in listed(state) and not found)
        if settled or time.monotonic() >= deadline:
            return evicted
        time.sleep(every)


def watch(
    mine: str,
    pages: Iterable[str],
    on_forgotten: Callable[[], None],
    read: Callable[[str], dict[str, Any]] = _read,
    every: float = WATCH_EVERY_S,
    after: int = FORGOTTEN_AFTER,
    stop: threading.Event | None = None,
) -> None:
    """Look at the masters' pages every `every` s; `on_forgotten()` once a live master has not
    listed `mine` `after` looks in a row. A master away, in recovery or standing by says nothing."""
    stop = stop or threading.Event()
    misses = 0
    while not stop.wait(every):
        alive = []
        for page in pages:
            try:
                state = read(page)
            except (OSError, ValueError):
                continue
            if state.get("status") == "ALIVE":
                alive.append(state)
        if not alive or any(mine in listed(state) for state in alive):
            misses = 0
            continue
        misses += 1
        LOG.warning("%s: the master does not list this application (%d of %d looks)", mine, misses, after)
        if misses >= after:
            on_forgotten()
            return


def _exit_forgotten() -> None:
    LOG.error("the master forgot this application: the driver exits, to register anew when it starts again")
    logging.shutdown()
    os._exit(EXIT_FORGOTTEN)


def settle_with_master(spark: SparkSession, name: str) -> None:
    """In the background, beside the app's start (a master that is away must not hold it up): the
    predecessors' applications evicted, and this one's registration watched. Nothing on a cluster
    that is not standalone (a test's local session)."""
    context = spark.sparkContext
    if not str(context.master).startswith("spark://"):
        return
    ui_port = int(context.getConf().get("spark.master.ui.port", "8080"))
    pages = master_pages(str(context.master), ui_port)
    mine = context.applicationId
    unregister = unregister_at(spark)

    def evict_predecessors() -> None:
        try:
            evict(name, mine, pages, unregister)
        except Exception:  # the app runs on without it; its cores come back when the master notices
            LOG.exception("%s: the earlier drivers' applications were not unregistered", name)

    threading.Thread(target=evict_predecessors, name="pikit-evict-predecessors", daemon=True).start()
    threading.Thread(
        target=watch, args=(mine, pages, _exit_forgotten), name="pikit-master-watch", daemon=True
    ).start()
