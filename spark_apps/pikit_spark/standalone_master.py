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

**Its executors, spread over the Pis.** The master places an application's executors once, on the
workers alive at that moment, and never moves them. An app started while one worker was away (a
Pi lost, rebooting, or restarted by a play) keeps its executors together on another Pi after that
Pi is back: it has that Pi's cores only, and its partitions' tasks change Python workers from batch
to batch, because Spark's shuffle prefers a host, not an executor (each change costs the task a
fence and a state read, partition_sink.py). So between micro-batches the driver looks: when two of
its executors share a host and an alive worker on a host with none of them has room for one, it
kills one of the two and the master starts its replacement on the worker with the most free cores
(spark.deploy.workerSelectionPolicy's default). A move that lands on the same host again is tried
again later, each time after twice as long.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
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


# How often the driver looks at where its executors are, and how long it waits after a move
# before the next (doubled after each move while they stay crowded, up to the cap).
SPREAD_LOOK_S = 30.0
SPREAD_BACKOFF_S = 120.0
SPREAD_BACKOFF_CAP_S = 3600.0


def crowded_executor(
    executors: Mapping[str, str], master_state: dict[str, Any], cores: int, memory_mb: int
) -> str | None:
    """The executor (id -> host) to start again on another Pi: the newest of several on one host,
    when an alive worker on a host with none of them has the cores and memory of one executor, and
    at least as many free cores as the crowded host will have once it is gone (the master starts
    the replacement on the worker with the most). None: nothing to move."""
    on: dict[str, list[str]] = defaultdict(list)
    for executor, host in executors.items():
        on[host].append(executor)
    alive = {w["host"]: w for w in master_state.get("workers", []) if w.get("state") == "ALIVE"}
    for host, here in sorted(on.items(), key=lambda item: -len(item[1])):
        if len(here) < 2:
            break
        freed = alive.get(host, {}).get("coresfree", 0) + cores
        if any(
            other not in on and w["coresfree"] >= max(cores, freed) and w["memoryfree"] >= memory_mb
            for other, w in alive.items()
        ):
            return max(here, key=lambda executor: (len(executor), executor))
    return None


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


def alive_masters(
    pages: Iterable[str], read: Callable[[str], dict[str, Any]] = _read
) -> list[dict[str, Any]]:
    """The pages of the masters that answer and are ALIVE (not away, recovering or standing by)."""
    alive = []
    for page in pages:
        try:
            state = read(page)
        except (OSError, ValueError):
            continue
        if state.get("status") == "ALIVE":
            alive.append(state)
    return alive


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
        alive = alive_masters(pages, read)
        if not alive or any(mine in listed(state) for state in alive):
            misses = 0
            continue
        misses += 1
        LOG.warning("%s: the master does not list this application (%d of %d looks)", mine, misses, after)
        if misses >= after:
            on_forgotten()
            return


def spread(
    executors: Callable[[], dict[str, str]],
    pages: Iterable[str],
    replace: Callable[[str], None],
    cores: int,
    memory_mb: int,
    busy: Callable[[], bool] = lambda: False,
    read: Callable[[str], dict[str, Any]] = _read,
    look: float = SPREAD_LOOK_S,
    backoff: float = SPREAD_BACKOFF_S,
    stop: threading.Event | None = None,
) -> None:
    """Every `look` s, between micro-batches (not `busy()`), one crowded executor replaced
    (crowded_executor, from the live master's page); after a move, the next look waits `backoff`
    s, doubled while the executors stay crowded."""
    stop = stop or threading.Event()
    wait, after_move = look, backoff
    while not stop.wait(wait):
        wait = look
        if busy():
            wait = min(look, 5.0)
            continue
        try:
            placed = executors()
        except Exception as exc:  # the JVM busy or shutting down: a later look, not a dead thread
            LOG.info("the app's executors not listed: %s", exc)
            continue
        # The master's page is read only when two executors share a host.
        alive = alive_masters(pages, read) if len(set(placed.values())) < len(placed) else []
        moving = crowded_executor(placed, alive[0], cores, memory_mb) if alive else None
        if moving is None:
            after_move = backoff
            continue
        LOG.warning(
            "executor %s shares %s with another of this app's while a worker elsewhere has room: "
            "it is replaced, the master starting its successor on that worker",
            moving,
            placed[moving],
        )
        replace(moving)
        wait, after_move = after_move, min(after_move * 2, SPREAD_BACKOFF_CAP_S)


def executor_hosts(spark: SparkSession) -> dict[str, str]:
    """The app's live executors (id -> host), from the driver's own status store."""
    listed = spark.sparkContext._jsc.sc().statusStore().executorList(True)
    found = {}
    for i in range(listed.size()):
        executor = listed.apply(i)
        if executor.id() != "driver":
            found[str(executor.id())] = str(executor.hostPort()).rpartition(":")[0]
    return found


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
    jvm, conf = context._jvm, context.getConf()
    assert jvm is not None
    cores = int(conf.get("spark.executor.cores", "1"))
    memory_mb = int(jvm.org.apache.spark.util.Utils.memoryStringToMb(conf.get("spark.executor.memory", "1g")))

    def busy() -> bool:
        return any(query.status["isTriggerActive"] for query in spark.streams.active)

    def replace(executor: str) -> None:
        context._jsc.sc().killAndReplaceExecutor(executor)

    threading.Thread(
        target=spread,
        args=(lambda: executor_hosts(spark), pages, replace, cores, memory_mb, busy),
        name="pikit-spread-executors",
        daemon=True,
    ).start()
