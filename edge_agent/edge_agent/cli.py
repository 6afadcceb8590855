"""`edge-agent run|check|flash`: the agent's command line."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
from dataclasses import replace
from pathlib import Path

from pikit_contract.signing import read_key

from edge_agent.config import Config, ConfigError, load
from edge_agent.release import VERSION

DEFAULT_CONFIG = Path("/etc/edge-agent/config.toml")


def _with_overrides(config: Config, args: argparse.Namespace) -> Config:
    if args.device_id:
        config = replace(config, device_id=args.device_id)
    if args.bootstrap:
        config = replace(config, kafka=replace(config.kafka, bootstrap_servers=args.bootstrap.split(",")))
    if args.spool_dir:
        config = replace(config, spool=replace(config.spool, directory=args.spool_dir))
    return config


def check_certificates(config: Config) -> list[str]:
    """Problems with the CA, the client certificate and its key; empty when all is well.

    Written for Debian bookworm's cryptography 38 as well as current releases.
    """
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    kafka = config.kafka
    if not kafka.cert_file:
        return ["kafka.cert_file: not set; the cluster accepts only mTLS clients"]
    try:
        # The trust bundle holds two CAs while the cluster's CA is rotated.
        trusted = Path(kafka.ca_file).read_bytes()
        marker = b"-----BEGIN CERTIFICATE-----"
        cas = [x509.load_pem_x509_certificate(marker + block) for block in trusted.split(marker)[1:]]
        if not cas:
            raise ValueError(f"{kafka.ca_file}: no certificate")
        pem = Path(kafka.cert_file).read_bytes()
        begin = pem.index(b"-----BEGIN CERTIFICATE-----")
        cert = x509.load_pem_x509_certificate(pem[begin:])
        key = serialization.load_pem_private_key(pem, password=None)
    except (OSError, ValueError) as exc:
        return [f"kafka.ca_file/cert_file: cannot read ({exc})"]
    problems = []
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(serialization.Encoding.DER, public) != key.public_key().public_bytes(
        serialization.Encoding.DER, public
    ):
        problems.append("kafka.cert_file: the private key does not belong to the certificate")
    hash_algorithm = cert.signature_hash_algorithm

    def issued_by(ca: x509.Certificate) -> bool:
        ca_key = ca.public_key()
        try:
            if cert.issuer != ca.subject or hash_algorithm is None:
                return False
            if isinstance(ca_key, rsa.RSAPublicKey):
                ca_key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), hash_algorithm)
            elif isinstance(ca_key, ec.EllipticCurvePublicKey):
                ca_key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hash_algorithm))
            else:
                return False
        except InvalidSignature:
            return False
        return True

    if not any(issued_by(ca) for ca in cas):
        problems.append("kafka.cert_file: not issued by a CA in kafka.ca_file")
    not_after = getattr(cert, "not_valid_after_utc", None) or cert.not_valid_after.replace(tzinfo=dt.UTC)
    now = dt.datetime.now(dt.UTC)
    if not_after < now:
        problems.append(f"kafka.cert_file: expired on {not_after:%Y-%m-%d}")
    elif not_after < now + dt.timedelta(days=30):
        problems.append(f"kafka.cert_file: expires on {not_after:%Y-%m-%d} (within 30 days)")
    if kafka.signing_key_file:
        try:
            read_key(kafka.signing_key_file)
        except (OSError, ValueError) as exc:
            problems.append(f"kafka.signing_key_file: cannot read ({exc})")
    cn = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    if not cn or cn[0].value != config.device_id:
        problems.append(
            f"kafka.cert_file: CN {cn[0].value if cn else None!r} differs from device_id; ACLs use the CN"
        )
    return problems


def check_broker(config: Config) -> str | None:
    from kafka import KafkaProducer

    from edge_agent.kafka_link import producer_options

    try:
        producer = KafkaProducer(**{**producer_options(config), "bootstrap_timeout_ms": 8000})
        partitions = producer.partitions_for(config.kafka.topic)
        producer.close(timeout=2)
    except Exception as exc:
        return f"kafka.bootstrap_servers: no broker reachable ({type(exc).__name__}: {exc})"
    if not partitions:
        return f"kafka.topic: {config.kafka.topic!r} does not exist or this device may not describe it"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edge-agent", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("run", "sample sensors and produce to Kafka"),
        ("check", "validate config, certificates, broker"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
        p.add_argument("--device-id")
        p.add_argument("--bootstrap", help="host:port[,host:port]")
        p.add_argument("--spool-dir")
        p.add_argument("--log-level", default="INFO")
    from edge_agent import flash

    flash.add_arguments(sub.add_parser("flash", help="prepare a Raspberry Pi OS image or boot partition"))
    sub.add_parser("sensors", help="list the sensor types, each with a [[sensors]] table that configures it")
    args = parser.parse_args(argv)
    if args.command == "sensors":
        from edge_agent.sensors import sensor_types

        print("\n\n".join(kind.sample for kind in sensor_types().values()))
        return 0
    if args.command == "flash":
        try:
            return flash.run(args)
        except flash.FlashError as exc:
            print(f"edge-agent flash: {exc}", file=sys.stderr)
            return 2
    logging.basicConfig(
        level=args.log_level.upper(),
        format="level=%(levelname)s logger=%(name)s msg=%(message)s",
        stream=sys.stdout,
    )
    from edge_agent.agent import Agent
    from edge_agent.sensors import build

    try:
        config = _with_overrides(load(args.config), args)
        if args.command == "run":
            agent = Agent(config)
        else:
            for i, sensor in enumerate(config.sensors):
                build(sensor, i)
    except ConfigError as exc:
        print(f"edge-agent: config error: {exc}", file=sys.stderr)
        return 2
    if args.command == "check":
        problems = check_certificates(config)
        broker = check_broker(config)
        problems += [broker] if broker else []
        for problem in problems:
            print(f"edge-agent check: {problem}", file=sys.stderr)
        if not problems:
            print(f"edge-agent check: OK ({config.device_id} -> {','.join(config.kafka.bootstrap_servers)})")
        return 1 if problems else 0
    agent.handle_signals()
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
