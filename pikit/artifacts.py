"""Fill the controller's artifact cache, from which every role installs.

Nodes never download anything: roles copy from this cache. Sources, in order:
1. a file the user already placed in the cache (verified against the manifest
   when it is listed there, trusted as the user's choice when it is not);
2. the Apache release archive, with its published SHA-512 checked;
3. Maven Central: the runtime dependency closure of the component's artifacts,
   resolved by Maven with strict checksums, laid out like the official tarball
   (`<name>/libs/*.jar`) and packed into a reproducible tarball.
Spark is the exception: it comes from PyPI's pyspark (an sdist, built into a wheel
here once), and only its Kafka connector from Maven Central.

`MANIFEST.json` records the sha256 of every file. A re-run with a full cache
only re-hashes files; a file whose hash no longer matches is fetched again.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pikit_contract.readings import SCHEMA_VERSION

from pikit import REPO, role_default
from pikit.phases import die, exclusive, phase, run, say

APACHE_ARCHIVE = os.environ.get("PIKIT_APACHE_ARCHIVE", "https://archive.apache.org/dist")
# Kafka's own tarball ships these too; the broker does not start without a logging backend.
# slf4j-api is pinned because Maven's nearest-wins mediation otherwise picks a 1.7 API
# (via metrics-core) that the log4j 2 binding cannot serve.
KAFKA_LOGGING = [
    ("org.apache.logging.log4j", "log4j-core", "2.24.3"),
    ("org.apache.logging.log4j", "log4j-slf4j2-impl", "2.24.3"),
    ("org.slf4j", "slf4j-api", "2.0.17"),
]


def cache_dir() -> Path:
    return Path(os.environ.get("PIKIT_ARTIFACTS", REPO / "artifacts"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Manifest:
    path: Path
    files: dict[str, dict[str, str | int]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        if path.exists():
            return cls(path, json.loads(path.read_text()).get("files", {}))
        return cls(path)

    def verified(self, rel: str) -> bool:
        """True when the file exists and matches the hash recorded for it."""
        entry = self.files.get(rel)
        target = self.path.parent / rel
        if entry is None or not target.exists():
            return False
        if target.stat().st_size == entry["size"] and sha256_of(target) == entry["sha256"]:
            return True
        say(f"{rel}: checksum mismatch, fetching it again")
        target.unlink()
        del self.files[rel]
        return False

    def record(self, rel: str, source: str, **facts: str | int) -> None:
        """The file's hash and size, where it came from, and `facts` a role reads about it."""
        target = self.path.parent / rel
        entry: dict[str, str | int] = {
            "sha256": sha256_of(target),
            "size": target.stat().st_size,
            "source": source,
        }
        self.files[rel] = {**entry, **facts}
        self.save()

    def save(self) -> None:
        body = json.dumps({"files": dict(sorted(self.files.items()))}, indent=2) + "\n"
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(body)
        tmp.replace(self.path)


def _download(url: str, dest: Path, timeout: float = 8.0) -> None:
    part = dest.with_name(dest.name + ".part")
    with urllib.request.urlopen(url, timeout=timeout) as response, part.open("wb") as out:
        shutil.copyfileobj(response, out)
    part.replace(dest)


def parse_sha512_file(text: str) -> str:
    """Apache publishes `name: AB12 CD34 ...` (gpg --print-md) or `ab12cd34...  name` (sha512sum)."""
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    digest = text.split(":", 1)[1] if first.endswith(":") else first
    digest = "".join(digest.split()).lower()
    if len(digest) != 128 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"not a SHA-512 checksum file: {text[:80]!r}")
    return digest


def _published_sha512(url: str) -> str:
    with urllib.request.urlopen(url, timeout=8.0) as response:
        return parse_sha512_file(response.read().decode())


def from_apache_archive(project_path: str, filename: str, dest: Path) -> bool:
    url = f"{APACHE_ARCHIVE}/{project_path}/{filename}"
    try:
        expected = _published_sha512(url + ".sha512")
        _download(url, dest, timeout=30.0)
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as exc:
        say(f"Apache archive not reachable for {filename} ({exc}); falling back")
        return False
    digest = hashlib.sha512(dest.read_bytes()).hexdigest()
    if digest != expected:
        dest.unlink()
        die(f"{filename} from {url} does not match its published SHA-512; refusing it")
    return True


# Some poms (Spark's) name extra repositories that are unreachable here; Maven Central serves all.
MAVEN_SETTINGS = (
    "<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>"
    f"<url>{os.environ.get('PIKIT_MAVEN_CENTRAL', 'https://repo.maven.apache.org/maven2')}</url>"
    "</mirror></mirrors></settings>\n"
)


def _pom(coordinates: list[tuple[str, str, str]]) -> str:
    deps = "\n".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in coordinates
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>pikit</groupId><artifactId>artifact-cache</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>\n"
    )


def maven_closure(coordinates: list[tuple[str, str, str]], libs: Path, log: Path) -> None:
    """Copy the runtime dependency closure of `coordinates` into `libs/`."""
    with tempfile.TemporaryDirectory() as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(coordinates))
        settings = Path(work) / "settings.xml"
        settings.write_text(MAVEN_SETTINGS)
        run(
            [
                "mvn",
                "-B",
                "-q",
                "-s",
                settings,
                "--strict-checksums",
                "-f",
                pom,
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={libs}",
            ],
            log=log,
        )


def reproducible_tarball(tree: Path, dest: Path) -> None:
    """Pack `tree` so that the same jars always give the same bytes (stable manifest)."""

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = sorted(tree.rglob("*"))
        tar.add(tree, arcname=tree.name, recursive=False, filter=normalise)
        for path in paths:
            tar.add(path, arcname=f"{tree.name}/{path.relative_to(tree)}", recursive=False, filter=normalise)
    part = dest.with_name(dest.name + ".part")
    with part.open("wb") as out, gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    part.replace(dest)


def fetch_kafka(manifest: Manifest, version: str, scala: str) -> None:
    name = f"kafka_{scala}-{version}"
    rel = f"kafka/{name}.tgz"
    dest = cache_dir() / rel
    coordinates = [
        ("org.apache.kafka", f"kafka_{scala}", version),
        ("org.apache.kafka", "kafka-tools", version),
        # Kafka Connect's own connectors, as Apache's tarball carries them (roles/connect).
        ("org.apache.kafka", "connect-file", version),
        ("org.apache.kafka", "connect-mirror", version),
        *KAFKA_LOGGING,
    ]
    # A tarball built from Maven by an older list of coordinates lacks jars this one has.
    built = "maven-central:" + hashlib.sha256(repr(coordinates).encode()).hexdigest()[:16]
    source = str(manifest.files.get(rel, {}).get("source", ""))
    if source.startswith("maven-central") and source != built:
        say(f"{rel}: built from other coordinates, building it again")
        manifest.files.pop(rel)
        dest.unlink(missing_ok=True)
    if manifest.verified(rel):
        say(f"{rel}: cached and verified")
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if _user_file(manifest, rel):
        return
    if from_apache_archive(f"kafka/{version}", f"{name}.tgz", dest):
        manifest.record(rel, "apache-archive")
        return
    log = cache_dir() / ".logs" / f"{name}-maven.log"
    with phase(f"resolve {name} from Maven Central (log: {log})"), tempfile.TemporaryDirectory() as work:
        tree = Path(work) / name
        maven_closure(coordinates, tree / "libs", log)
        jars = sorted(p.name for p in (tree / "libs").glob("*.jar"))
        if f"kafka_{scala}-{version}.jar" not in jars:
            die(f"Maven did not deliver kafka_{scala}-{version}.jar; see {log}")
        say(f"{len(jars)} jars")
        reproducible_tarball(tree, dest)
    manifest.record(rel, built)


def fetch_jmx_exporter(manifest: Manifest, version: str) -> None:
    """Prometheus's JMX exporter javaagent: one shaded jar, checked by Maven against Central's sums."""
    name = f"jmx_prometheus_javaagent-{version}.jar"
    rel = f"metrics/{name}"
    if manifest.verified(rel):
        say(f"{rel}: cached and verified")
        return
    dest = cache_dir() / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if _user_file(manifest, rel):
        return
    log = cache_dir() / ".logs" / "jmx-exporter-maven.log"
    with phase(f"resolve {name} from Maven Central (log: {log})"), tempfile.TemporaryDirectory() as work:
        libs = Path(work) / "libs"
        maven_closure([("io.prometheus.jmx", "jmx_prometheus_javaagent", version)], libs, log)
        if not (libs / name).exists():
            die(f"Maven did not deliver {name}; see {log}")
        shutil.copyfile(libs / name, dest)
    manifest.record(rel, "maven-central")


def _artifact_name(jar: str) -> str:
    """`kafka-clients-3.9.0.jar` -> `kafka-clients` (what two versions of one library share)."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", jar)


def spark_tarball(version: str) -> str:
    """Apache's binary release, as the cache keeps it."""
    return f"spark/spark-{version}-bin-hadoop3.tgz"


def _user_file(manifest: Manifest, rel: str) -> bool:
    """A file the user put in the cache: taken once it matches the `.sha512` Apache publishes next
    to it (required: a half-copied 400 MB tarball must not be installed on every node)."""
    dest = cache_dir() / rel
    if not dest.exists():
        return False
    checksum = dest.with_name(dest.name + ".sha512")
    if not checksum.exists():
        die(f"{rel}: placed in the cache without its {checksum.name}; add Apache's checksum file next to it")
    if hashlib.sha512(dest.read_bytes()).hexdigest() != parse_sha512_file(checksum.read_text()):
        die(f"{rel} does not match {checksum.name}; refusing it (remove it or replace it)")
    say(f"{rel}: placed by the user, SHA-512 verified")
    manifest.record(rel, "user")
    return True


def fetch_spark(manifest: Manifest, version: str, scala: str) -> None:
    """Spark and the Kafka connector's Maven closure minus the jars Spark already ships.

    Spark itself: Apache's binary tarball when the cache has it (placed by the user with its
    .sha512, or fetched from the Apache archive where reachable); otherwise the pyspark wheel
    (PyPI ships it as an sdist: built here once) and its py4j dependency. The spark role installs
    whichever is recorded (spark_distribution: auto).
    """
    target = cache_dir() / "spark"
    tarball, wheel = spark_tarball(version), f"spark/pyspark-{version}-py2.py3-none-any.whl"
    connector_name = f"spark-kafka-connector_{scala}-{version}"
    connector = f"spark/{connector_name}.tgz"
    # Each verified() hashes the file (the tarball is over 400 MB): ask once, keep the answer.
    have_tarball = manifest.verified(tarball) or _user_file(manifest, tarball)
    py4j = sorted(rel for rel in manifest.files if rel.startswith("spark/py4j-"))
    have_wheel = not have_tarball and bool(py4j) and manifest.verified(wheel) and manifest.verified(py4j[-1])
    have_connector = manifest.verified(connector)
    if (have_tarball or have_wheel) and have_connector:
        say(
            f"Spark ({'tarball' if have_tarball else 'pyspark wheel, py4j'}) and the Kafka connector: "
            "cached and verified"
        )
        return
    target.mkdir(parents=True, exist_ok=True)
    log = cache_dir() / ".logs" / f"spark-{version}.log"
    if not (have_tarball or have_wheel):
        if from_apache_archive(f"spark/spark-{version}", Path(tarball).name, cache_dir() / tarball):
            manifest.record(tarball, "apache-archive")
            have_tarball = True
        else:
            with phase(f"pyspark {version} wheel and py4j from PyPI (log: {log})"):
                run([*PIP, "wheel", "-w", target, f"pyspark=={version}"], log=log)
            found = sorted(target.glob("py4j-*.whl"))
            if not (cache_dir() / wheel).exists() or not found:
                die(f"pip did not produce {wheel} and a py4j wheel; see {log}")
            manifest.record(wheel, "pypi")
            manifest.record(f"spark/{found[-1].name}", "pypi")
    if have_connector:
        return
    if have_tarball:
        with tarfile.open(cache_dir() / tarball) as tar:
            names = [n for n in tar.getnames() if "/jars/" in n]
    else:
        with zipfile.ZipFile(cache_dir() / wheel) as whl:
            names = [n for n in whl.namelist() if n.startswith("pyspark/jars/")]
    shipped = {_artifact_name(Path(n).name) for n in names}
    with (
        phase(f"resolve {connector_name} from Maven Central (log: {log})"),
        tempfile.TemporaryDirectory() as work,
    ):
        tree = Path(work) / connector_name
        jars = tree / "jars"
        maven_closure([("org.apache.spark", f"spark-sql-kafka-0-10_{scala}", version)], jars, log)
        for jar in jars.glob("*.jar"):
            if _artifact_name(jar.name) in shipped:
                jar.unlink()
        kept = sorted(p.name for p in jars.glob("*.jar"))
        if f"spark-sql-kafka-0-10_{scala}-{version}.jar" not in kept:
            die(f"Maven did not deliver spark-sql-kafka-0-10_{scala}-{version}.jar; see {log}")
        say(f"{len(kept)} connector jars not already in Spark: {', '.join(kept)}")
        reproducible_tarball(tree, cache_dir() / connector)
    manifest.record(connector, "maven-central")


def requirement_pin(name: str) -> str:
    """A package's pinned version in requirements.txt: the controller and the devices agree."""
    for line in (REPO / "requirements.txt").read_text().splitlines():
        match = re.match(rf"^{re.escape(name)}(\[[^\]]*\])?==(\S+)", line.strip())
        if match:
            return match.group(2)
    raise KeyError(f"{name} is not pinned in requirements.txt")


# The controller's own pip, quiet: its output goes to a phase's log.
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check", "-q")
# The zip format's earliest date: a wheel's entries get it instead of the build's time.
REPRODUCIBLE = {"SOURCE_DATE_EPOCH": "315532800"}
# The agent release's own wheels: (distribution, its folder in a checkout of the kit).
AGENT_WHEELS = (("pikit_edge_agent", "edge_agent"), ("pikit_contract", "contract"))


def agent_wheel(kit: Path, name: str, folder: str) -> str:
    """The cache path of a checkout's wheel of `folder`, at its pyproject's version."""
    return f"agent/{name}-{role_default_pyproject(kit / folder / 'pyproject.toml')}-py3-none-any.whl"


def build_wheel(source: Path, target: Path, log: Path) -> None:
    """The pure-Python project at `source` as a wheel in `target`. Built from a copy (building
    leaves build/ and egg-info behind), reproducibly: the same source gives the same bytes on any
    controller, so that a rebuilt cache does not reinstall (and restart) every agent on the next run."""
    with tempfile.TemporaryDirectory() as work:
        source_copy = Path(work) / source.name
        shutil.copytree(source, source_copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        run([*PIP, "wheel", "--no-deps", "-w", target, source_copy], log=log, env=REPRODUCIBLE)


def fetch_agent_wheels(manifest: Manifest) -> None:
    """The edge agent's wheel and pikit-contract's, built from edge_agent/ and contract/, and their
    pure-Python dependency from PyPI."""
    target = cache_dir() / "agent"
    kafka_python = requirement_pin("kafka-python")
    # Each wheel of ours is rebuilt whenever its source changes, not only its version.
    built = {
        agent_wheel(REPO, name, folder): (folder, "built:" + tree_hash(REPO / folder))
        for name, folder in AGENT_WHEELS
    }
    for rel, (_, source) in built.items():
        if manifest.files.get(rel, {}).get("source") != source:
            manifest.files.pop(rel, None)
    wanted = {rel: source for rel, (_, source) in built.items()}
    wanted[f"agent/kafka_python-{kafka_python}-py3-none-any.whl"] = "pypi"
    if all(manifest.verified(rel) for rel in wanted):
        say(f"{len(wanted)} agent wheels: cached and verified")
        return
    target.mkdir(parents=True, exist_ok=True)
    log = cache_dir() / ".logs" / "agent-wheels.log"
    with phase(f"agent wheels (log: {log})"):
        for rel, (folder, _) in built.items():
            if not manifest.verified(rel):
                build_wheel(REPO / folder, target, log)
        wheel_only = ["--no-deps", "--only-binary=:all:"]
        run([*PIP, "download", *wheel_only, "-d", target, f"kafka-python=={kafka_python}"], log=log)
    for rel, source in wanted.items():
        if not (cache_dir() / rel).exists():
            die(f"{rel} was not produced; see {log}")
        # The reading contract's version the release writes: a roll-out checks first that the
        # running Spark apps read it (roles/edge_agent/tasks/contract_gate.yml).
        facts = {"writes_schema": SCHEMA_VERSION} if rel.startswith("agent/pikit_edge_agent-") else {}
        manifest.record(rel, source, **facts)


def tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith(".egg-info"):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def role_default_pyproject(path: Path) -> str:
    return str(tomllib.loads(path.read_text())["project"]["version"])


COMPONENTS: dict[str, Callable[[Manifest], None]] = {
    "agent": fetch_agent_wheels,
    "kafka": lambda m: fetch_kafka(
        m, role_default("kafka", "kafka_version"), role_default("kafka", "kafka_scala_version")
    ),
    "metrics": lambda m: fetch_jmx_exporter(m, role_default("kafka", "kafka_jmx_exporter_version")),
    "spark": lambda m: fetch_spark(
        m, role_default("spark", "spark_version"), role_default("spark", "spark_scala_version")
    ),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("components", nargs="*", choices=[*COMPONENTS, []], help="default: all")
    parser.add_argument(
        "--kafka-version",
        action="append",
        default=[],
        metavar="X.Y.Z",
        help="also cache this Kafka release (repeatable): the one an upgrade goes to, or comes from",
    )
    args = parser.parse_args(argv)
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with exclusive(root / ".lock", "the artifact cache"), phase(f"artifact cache {root}"):
        manifest = Manifest.load(root / "MANIFEST.json")
        for name in args.components or ([] if args.kafka_version else list(COMPONENTS)):
            with phase(name):
                COMPONENTS[name](manifest)
        for version in args.kafka_version:
            with phase(f"kafka {version}"):
                fetch_kafka(manifest, version, role_default("kafka", "kafka_scala_version"))
        total = sum(int(e["size"]) for e in manifest.files.values())
        say(f"{len(manifest.files)} files, {total / 1e6:.1f} MB, manifest {manifest.path}")


if __name__ == "__main__":
    main()
