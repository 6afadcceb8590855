"""The agent's configuration: one TOML file, validated at start, errors naming the key.

device_id = "edge-1"                  # also the Kafka record key and the certificate CN
require_clock_sync = true             # sample only once the kernel says the clock is synchronised

[kafka]
bootstrap_servers = ["10.0.0.11:9092"]
topic = "sensor-readings"
ca_file = "/etc/edge-agent/tls/ca.crt"
cert_file = "/etc/edge-agent/tls/edge-agent.pem"   # private key + certificate (PEM)
signing_key_file = "/etc/edge-agent/tls/signing.key" # this device's record key, hex (signing.py)
compression = "auto"                  # auto (zstd, lz4, else gzip) | none | gzip | lz4 | zstd
readings_per_record = 100
linger_ms = 50

[spool]
directory = "/var/lib/edge-agent/spool"
max_bytes = 67108864
fsync = "interval"                    # always | interval | never (see spool.py)
fsync_interval = 1.0
full_policy = "drop_oldest"           # drop_oldest | stop_sampling

[metrics]
listen = "127.0.0.1:9108"             # Prometheus text; "" turns it off

[[sensors]]
type = "cpu_temperature"              # `edge-agent sensors` lists the types, each with a sample table
interval = 10.0
timeout = 10.0                        # a read taking longer fails (default: the interval)
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pikit_contract.readings import READINGS_TOPIC

from edge_agent.sensor_config import ConfigError, SensorConfig
from edge_agent.sensors import sensor_types
from edge_agent.spool import FSYNC_POLICIES, FULL_POLICIES

__all__ = ["Config", "ConfigError", "KafkaConfig", "SensorConfig", "SpoolConfig", "load", "parse"]

COMPRESSIONS = ("auto", "none", "gzip", "lz4", "zstd")
_DEVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: list[str]
    topic: str = READINGS_TOPIC
    ca_file: str = ""
    cert_file: str = ""
    signing_key_file: str = ""
    compression: str = "auto"
    readings_per_record: int = 100
    linger_ms: int = 50


@dataclass(frozen=True)
class SpoolConfig:
    directory: str = "/var/lib/edge-agent/spool"
    max_bytes: int = 64 * 1024 * 1024
    fsync: str = "interval"
    fsync_interval: float = 1.0
    full_policy: str = "drop_oldest"


@dataclass(frozen=True)
class Config:
    device_id: str
    kafka: KafkaConfig
    spool: SpoolConfig
    sensors: list[SensorConfig]
    metrics_listen: str = "127.0.0.1:9108"
    require_clock_sync: bool = True


def _take(
    table: dict[str, Any], key: str, path: str, kind: type | tuple[type, ...], default: Any = ...
) -> Any:
    if key not in table:
        if default is ...:
            raise ConfigError(f"{path}{key}: required")
        return default
    value = table.pop(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{path}{key}: must be {names}, got {value!r}")
    return value


def _no_leftovers(table: dict[str, Any], path: str) -> None:
    if table:
        raise ConfigError(f"{path}{sorted(table)[0]}: unknown key")


def _positive(value: float, key: str) -> None:
    if value <= 0:
        raise ConfigError(f"{key}: must be positive, got {value}")


def _choice(value: str, key: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{key}: must be one of {', '.join(choices)}, got {value!r}")


def parse(doc: dict[str, Any]) -> Config:
    doc = dict(doc)
    device_id = _take(doc, "device_id", "", str)
    if not _DEVICE.match(device_id):
        raise ConfigError(f"device_id: letters, digits and . _ : - only (max 64), got {device_id!r}")

    require_clock_sync = _take(doc, "require_clock_sync", "", bool, True)

    k = dict(_take(doc, "kafka", "", dict))
    servers = _take(k, "bootstrap_servers", "kafka.", list)
    if not servers or not all(isinstance(s, str) and re.match(r"^[^:\s]+:\d+$", s) for s in servers):
        raise ConfigError(f"kafka.bootstrap_servers: must be a non-empty list of host:port, got {servers!r}")
    kafka = KafkaConfig(
        bootstrap_servers=servers,
        topic=_take(k, "topic", "kafka.", str, READINGS_TOPIC),
        ca_file=_take(k, "ca_file", "kafka.", str, ""),
        cert_file=_take(k, "cert_file", "kafka.", str, ""),
        signing_key_file=_take(k, "signing_key_file", "kafka.", str, ""),
        compression=_take(k, "compression", "kafka.", str, "auto"),
        readings_per_record=_take(k, "readings_per_record", "kafka.", int, 100),
        linger_ms=_take(k, "linger_ms", "kafka.", int, 50),
    )
    _no_leftovers(k, "kafka.")
    _choice(kafka.compression, "kafka.compression", COMPRESSIONS)
    _positive(kafka.readings_per_record, "kafka.readings_per_record")
    if bool(kafka.ca_file) != bool(kafka.cert_file):
        raise ConfigError("kafka.cert_file: ca_file and cert_file go together (mTLS), or neither")

    s = dict(_take(doc, "spool", "", dict, {}))
    spool = SpoolConfig(
        directory=_take(s, "directory", "spool.", str, SpoolConfig.directory),
        max_bytes=_take(s, "max_bytes", "spool.", int, SpoolConfig.max_bytes),
        fsync=_take(s, "fsync", "spool.", str, SpoolConfig.fsync),
        fsync_interval=_take(s, "fsync_interval", "spool.", float, SpoolConfig.fsync_interval),
        full_policy=_take(s, "full_policy", "spool.", str, SpoolConfig.full_policy),
    )
    _no_leftovers(s, "spool.")
    _choice(spool.fsync, "spool.fsync", FSYNC_POLICIES)
    _choice(spool.full_policy, "spool.full_policy", FULL_POLICIES)
    if spool.max_bytes < 64 * 1024:
        raise ConfigError(f"spool.max_bytes: at least 65536, got {spool.max_bytes}")
    _positive(spool.fsync_interval, "spool.fsync_interval")

    m = dict(_take(doc, "metrics", "", dict, {}))
    listen = _take(m, "listen", "metrics.", str, "127.0.0.1:9108")
    _no_leftovers(m, "metrics.")
    if listen and not re.match(r"^[^\s]*:\d+$", listen):
        raise ConfigError(f"metrics.listen: host:port or empty, got {listen!r}")

    sensors = []
    names: set[str] = set()
    raw_sensors = _take(doc, "sensors", "", list)
    if not raw_sensors:
        raise ConfigError("sensors: at least one [[sensors]] table")
    for i, raw in enumerate(raw_sensors):
        path = f"sensors[{i}]."
        if not isinstance(raw, dict):
            raise ConfigError(f"sensors[{i}]: must be a table")
        table = dict(raw)
        kind = _take(table, "type", path, str)
        _choice(kind, f"{path}type", tuple(sensor_types()))
        interval = _take(table, "interval", path, float, 10.0)
        _positive(interval, f"{path}interval")
        timeout = _take(table, "timeout", path, float, interval)
        _positive(timeout, f"{path}timeout")
        name = _take(table, "name", path, str, kind)
        if name in names:
            raise ConfigError(f"{path}name: {name!r} is used twice (give each sensor its own name)")
        names.add(name)
        sensors.append(SensorConfig(kind, interval, name, table, timeout))
    _no_leftovers(doc, "")
    return Config(device_id, kafka, spool, sensors, listen, require_clock_sync)


def load(path: Path) -> Config:
    try:
        with path.open("rb") as handle:
            doc = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    return parse(doc)
