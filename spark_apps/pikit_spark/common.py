"""What every bundled app shares: command-line options, logging, the Spark session, Kafka I/O."""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pikit_contract.signing import Keyring
from pikit_contract.tls_handshake import bound_tls_handshakes
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

LOG = logging.getLogger("pikit")
AVAILABLE_NOW = "available-now"


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    # The options the spark role sets are required: their values live in the role's defaults only.
    parser.add_argument(
        "--kafka-properties",
        required=True,
        help="Kafka client settings (bootstrap.servers, mTLS), as the spark role writes them",
    )
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        help="default: the app's executor cores (spark.cores.max), one task per core and stage",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def streaming_parser(description: str, app: str) -> argparse.ArgumentParser:
    parser = base_parser(description)
    parser.add_argument("--readings-topic", required=True)
    parser.add_argument(
        "--checkpoint-dir",
        required=True,
        help=f"a scratch directory on the driver's own disk (<data>/scratch/{app}), emptied at every "
        "start: where a driver resumes is in Kafka",
    )
    parser.add_argument(
        "--instance",
        default="",
        help=f"the app's name in Kafka: its transactional id, group and internal topics are "
        f"pikit-spark-<instance>[-state|-batches|-leader] (default: {app}); a second instance has a "
        "state of its own",
    )
    parser.add_argument(
        "--driver-rank",
        type=int,
        default=None,
        help="this Pi's place among the app's driver Pis (0 first): the driver stands by until the "
        "app's election gives it the app (pikit_spark/leadership.py); without it, no election",
    )
    parser.add_argument(
        "--trigger",
        default="10 seconds",
        help=f"micro-batch interval, or {AVAILABLE_NOW!r}: process what the topic holds now, then stop",
    )
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        choices=["earliest", "latest"],
        help="where a partition with no offset committed by the app starts; the others resume there",
    )
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, default=20000, help="bounds a batch after an outage"
    )
    parser.add_argument(
        "--read-tasks",
        type=int,
        help="tasks that read the topic each micro-batch (default: the app's cores; 0: one per partition)",
    )
    parser.add_argument(
        "--max-clock-skew-seconds",
        type=int,
        default=300,
        help="a reading stamped further ahead of the processing time is a dead letter",
    )
    parser.add_argument(
        "--metrics-listen",
        default="",
        metavar="HOST:PORT",
        help="serve the app's Prometheus metrics (queries' progress and backlog, late and dead-letter "
        "counts) at http://HOST:PORT/metrics; empty: none",
    )
    parser.add_argument(
        "--stall-after-seconds",
        type=float,
        default=0,
        help="under a systemd unit with WatchdogSec=, stop telling systemd the driver is alive once no "
        "query has started, made a micro-batch or found nothing to read for this long; 0: never stop",
    )
    parser.add_argument(
        "--device-keys",
        default="",
        help="the devices' keyring, JSON (pikit_contract.signing.Keyring, the spark role writes it): a "
        "record counts only when signed by the device it claims, not revoked; read again when it changes; "
        "without it no record is checked",
    )
    return parser


class KeyringFile:
    """The devices' keyring (--device-keys, pikit_contract.signing.Keyring), read again when the file
    changes: a device that joins, is revoked or is restored (the spark role rewrites the file
    whole) reaches a running app without a restart of the app."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        # SHA-1 of the bytes last read, as Ansible's copy reports a file's checksum: the app shows
        # it (pikit_app_keyring_info), and playbooks/edge-revoke.yml waits for the one it wrote.
        self.sha1 = ""

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def changed(self) -> bool:
        """Whether the file differs from the one last read (a missing file is no change)."""
        stamp = self._stat()
        return stamp is not None and stamp != self._stamp

    def newer(self) -> Keyring | None:
        """The file's keyring when it changed since the last read and reads well; None otherwise.
        A file that does not read (a hand edit gone wrong) is logged once and left: the app keeps
        checking against the keyring it holds, and shows that one's SHA-1."""
        if not self.changed():
            return None
        try:
            return self.read()
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self._stamp = self._stat()
            LOG.error("%s: not taken (%s); records are checked against the keyring held", self.path, exc)
            return None

    def read(self) -> Keyring:
        stamp = self._stat()
        data = self.path.read_bytes()
        ring = Keyring.from_json(data.decode())
        self._stamp, self.sha1 = stamp, hashlib.sha1(data).hexdigest()
        revoked = f", {len(ring.revoked)} revoked ({', '.join(sorted(ring.revoked))})" if ring.revoked else ""
        LOG.info("checking the signatures of %d devices' records%s", len(ring.keys), revoked)
        return ring


def keyring_file(path: str) -> KeyringFile | None:
    """The keyring, or None when the app checks no signatures."""
    if not path:
        LOG.warning("no --device-keys: records are not checked against the device that sent them")
        return None
    return KeyringFile(path)


BatchFunction = Callable[[DataFrame, int], None]


def start_batches(
    frame: DataFrame, process: BatchFunction, checkpoint: str, app: str, args: argparse.Namespace
) -> StreamingQuery:
    """An app's one query: each micro-batch of `frame` to `process`, checkpointed, on the app's trigger."""
    writer = frame.writeStream.foreachBatch(process).option("checkpointLocation", checkpoint)
    return writer.trigger(**trigger(args)).queryName(app).start()


def trigger(args: argparse.Namespace) -> dict[str, Any]:
    """DataStreamWriter.trigger's arguments: a catch-up run stops once it has read the topic's end."""
    return {"availableNow": True} if args.trigger == AVAILABLE_NOW else {"processingTime": args.trigger}


def setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # py4j logs every callback at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def read_properties(path: str) -> dict[str, str]:
    """The client properties file the spark role writes (bootstrap.servers, mTLS in PEM)."""
    properties: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, value = line.split("=", 1)
            properties[key.strip()] = value.strip()
    if "bootstrap.servers" not in properties:
        raise SystemExit(f"{path}: bootstrap.servers is not set")
    return properties


def kafka_options(path: str) -> dict[str, str]:
    """The client properties as the connector's `kafka.`-prefixed options."""
    return {f"kafka.{key}": value for key, value in read_properties(path).items()}


def kafka_python_client(path: str) -> dict[str, Any]:
    """The same identity and request bound as kafka-python options, for the driver's
    transactional sink: a frozen broker then holds the sink's requests as briefly as the
    source's (spark_kafka_client_properties). Every kafka-python TLS handshake of the driver is
    bounded from here on (pikit_contract/tls_handshake.py)."""
    bound_tls_handshakes()
    properties = read_properties(path)
    client: dict[str, Any] = {
        "bootstrap_servers": properties["bootstrap.servers"].split(","),
        # Kafka's Java clients' 1 s, not kafka-python's 30 s: after every broker was down for 90 s,
        # the active driver's election consumer came back to the group 20 s after the standby's, and
        # the app moved to the standby (a cold start) for no reason.
        "reconnect_backoff_max_ms": 1000,
    }
    if "request.timeout.ms" in properties:
        client["request_timeout_ms"] = int(properties["request.timeout.ms"])
    if properties.get("security.protocol", "PLAINTEXT").upper() == "SSL":
        # A PEM keystore holds the key and the certificate chain in one file.
        client.update(
            security_protocol="SSL",
            ssl_cafile=properties["ssl.truststore.location"],
            ssl_certfile=properties["ssl.keystore.location"],
        )
    return client


# What every app's session sets, whatever the cluster's spark-defaults.conf says. The Spark unit
# tests' session and the parse bench's take the same, so that they run as the apps do.
SESSION_SETTINGS: dict[str, bool | float | int | str | None] = {
    # Windows, dates and the readings' event times are UTC, on every Pi whatever its time zone.
    "spark.sql.session.timeZone": "UTC",
    # Adaptive execution runs each shuffle's map side as a Spark job of its own: a micro-batch's
    # one read becomes two jobs, and on a Pi a job costs a second or more whatever its size.
    # Its gains (coalescing a few shuffle partitions, re-planning joins) are nil for these
    # batches, whose shuffles hold summaries of thousands of rows and whose joins are broadcast.
    "spark.sql.adaptive.enabled": "false",
    # A task waits this long for the executor it prefers: a Kafka partition's last reader, a
    # shuffle's map side. Every executor reads any partition over the network alike, and the
    # cores idle meanwhile: on the lab a two-stage job of 15 rows took 0.5 s, most of it waiting.
    "spark.locality.wait": "0s",
    # The offset and commit logs written through Hadoop's FileSystem, not its FileContext: on
    # a local or NFS disk without Hadoop's native library, FileContext runs `readlink` and
    # `chmod` as child processes, 20 per micro-batch (walCommit + commitOffsets: 100-240 ms
    # on the lab, 10x the FileSystem's). Its rename is atomic there all the same.
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
    # Every PySpark function call otherwise also tells the JVM its Python call site (a
    # session lookup, a conf read, set and clear: 4-6 py4j round trips each), so that an
    # error can name the line that built the failing expression. Building a micro-batch's
    # plan made 1,131 round trips where 511 do without: 0.3 s a batch on the lab. An error
    # still names the expression and its plan; only the Python line is missing.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # A query's stop() waits for its thread at most this long, then raises: a keyring
    # reload that meets a micro-batch stuck in a dead broker's request ends the app, which
    # systemd starts again, instead of waiting forever (Spark's default is 0, no bound).
    "spark.sql.streaming.stopTimeout": "60s",
    # State of any stateful operator in RocksDB: off the JVM heap, which is small on a Pi. (The
    # apps use none: their state is their own. RocksDB has no armhf build: docs/design/any-pi-dies.md.)
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
}


def session(app: str, shuffle_partitions: int | None) -> SparkSession:
    spark = SparkSession.builder.appName(app).config(map=SESSION_SETTINGS).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # A task costs its launch whatever it carries, and the apps' shuffles carry summaries (a row
    # per window and device), not readings: more tasks than cores only queue behind each other.
    # (The lab's batch jobs took this number on a checkpoint started with 4: it is not restored
    # from the offset log for them.)
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions or cores(spark)))
    return spark


def cores(spark: SparkSession) -> int:
    """The executor cores the app was given (spark-submit --total-executor-cores)."""
    given = spark.sparkContext.getConf().get("spark.cores.max")
    return int(given) if given else spark.sparkContext.defaultParallelism


FETCH_MAX_WAIT_MS = 10
OFFSET_LOOKUP_TRIES = 60  # ~10 minutes of outage at 10 s a try


def read_topic(
    spark: SparkSession, kafka: dict[str, str], topic: str, args: argparse.Namespace, starting: str = ""
) -> DataFrame:
    """The topic's records as a stream, from `starting` (Spark's startingOffsets; by default
    --starting-offsets), which counts only for a query whose checkpoint is new."""
    records = (
        spark.readStream.format("kafka")
        .options(**kafka)
        .option("subscribe", topic)
        .option("startingOffsets", starting or args.starting_offsets)
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        # Readings deleted by retention while the app was down are logged, not fatal.
        .option("failOnDataLoss", "false")
        # Every broker away: the query waits in its offset lookup (each try bounded by the client's
        # default.api.timeout.ms) and goes on seconds after they return. With Spark's 3 tries it
        # failed ~30 s into an outage, and the app restarted over and over: a broker back during a
        # restart waited for the next start (65 s in the long nemesis). The watchdog still ends a
        # query that has not moved for spark_app_stall_seconds.
        .option("fetchOffset.numRetries", str(OFFSET_LOOKUP_TRIES))
        .option("fetchOffset.retryIntervalMs", "1000")
        # The signer and its MAC travel as headers (pikit_contract/signing.py).
        .option("includeHeaders", "true")
        # An executor's consumer reads offsets that the brokers already hold, and asks each
        # partition's range of offsets after each read. The Java client sends its next fetch
        # before it returns the records it has; at the log's end the broker holds that fetch
        # for fetch.max.wait.ms (500 ms by default), and the range request queued behind it on
        # the same connection waits as long: half a second per partition per micro-batch.
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
        .load()
    )
    # One task per executor core, each reading a few of the topic's partitions: a task per
    # partition queued up behind the cores, at a launch's cost each, at every micro-batch.
    tasks = cores(spark) if args.read_tasks is None else args.read_tasks
    return records.coalesce(tasks) if tasks else records
