"""The artifact cache: checksum parsing, reproducible packing, corruption handling."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest

from pikit import artifacts, role_default

DIGEST = hashlib.sha512(b"kafka").hexdigest()


def test_parses_gpg_style_sha512() -> None:
    upper = DIGEST.upper()
    chunks = " ".join(upper[i : i + 8] for i in range(0, 128, 8))
    text = f"kafka_2.13-4.3.1.tgz: {chunks[:100]}\n                      {chunks[100:]}\n"
    assert artifacts.parse_sha512_file(text) == DIGEST


def test_parses_sha512sum_style() -> None:
    assert artifacts.parse_sha512_file(f"{DIGEST}  kafka_2.13-4.3.1.tgz\n") == DIGEST


@pytest.mark.parametrize("text", ["", "<html>Not Found</html>", "abc: 1234"])
def test_rejects_what_is_not_a_checksum(text: str) -> None:
    with pytest.raises(ValueError, match="not a SHA-512"):
        artifacts.parse_sha512_file(text)


def _tree(root: Path) -> Path:
    tree = root / "kafka_2.13-9.9.9"
    (tree / "libs").mkdir(parents=True)
    (tree / "libs/a.jar").write_bytes(b"a" * 1000)
    (tree / "libs/b.jar").write_bytes(b"b" * 1000)
    return tree


def test_tarball_is_reproducible(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    artifacts.reproducible_tarball(tree, tmp_path / "one.tgz")
    (tree / "libs/a.jar").touch()  # a newer mtime must not change the bytes
    artifacts.reproducible_tarball(tree, tmp_path / "two.tgz")
    assert (tmp_path / "one.tgz").read_bytes() == (tmp_path / "two.tgz").read_bytes()


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PIKIT_ARTIFACTS", str(tmp_path / "cache"))
    monkeypatch.setattr(artifacts, "from_apache_archive", lambda *a: False)
    (tmp_path / "cache").mkdir()
    return tmp_path / "cache"


def _fake_maven(calls: list[int]):  # type: ignore[no-untyped-def]
    def closure(coordinates: list[tuple[str, str, str]], libs: Path, log: Path) -> None:
        calls.append(1)
        libs.mkdir(parents=True)
        for group, artifact, version in coordinates:
            (libs / f"{artifact}-{version}.jar").write_bytes(f"{group}:{artifact}".encode())

    return closure


def test_full_cache_downloads_nothing_and_corruption_is_refetched(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(artifacts, "maven_closure", _fake_maven(calls))
    manifest = artifacts.Manifest.load(cache / "MANIFEST.json")
    artifacts.fetch_kafka(manifest, "9.9.9", "2.13")
    tgz = cache / "kafka/kafka_2.13-9.9.9.tgz"
    good = tgz.read_bytes()
    assert calls == [1]
    assert str(manifest.files["kafka/kafka_2.13-9.9.9.tgz"]["source"]).startswith("maven-central:")

    artifacts.fetch_kafka(artifacts.Manifest.load(cache / "MANIFEST.json"), "9.9.9", "2.13")
    assert calls == [1], "a verified cache must not be fetched again"

    tgz.write_bytes(good[: len(good) // 2])  # a partial file
    artifacts.fetch_kafka(artifacts.Manifest.load(cache / "MANIFEST.json"), "9.9.9", "2.13")
    assert calls == [1, 1]
    assert tgz.read_bytes() == good

    # A cache filled before Connect's connectors joined the release's jars lacks them.
    older = artifacts.Manifest.load(cache / "MANIFEST.json")
    older.files["kafka/kafka_2.13-9.9.9.tgz"]["source"] = "maven-central"
    older.save()
    artifacts.fetch_kafka(artifacts.Manifest.load(cache / "MANIFEST.json"), "9.9.9", "2.13")
    assert calls == [1, 1, 1], "a tarball built from other coordinates is built again"
    with tarfile.open(tgz) as tar:
        assert "kafka_2.13-9.9.9/libs/connect-mirror-9.9.9.jar" in tar.getnames()


def test_a_file_the_user_placed_is_used_once_its_sha512_matches(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(artifacts, "maven_closure", _fake_maven(calls))
    placed = cache / "kafka/kafka_2.13-9.9.9.tgz"
    placed.parent.mkdir()
    placed.write_bytes(b"the official tarball")
    manifest = artifacts.Manifest.load(cache / "MANIFEST.json")
    with pytest.raises(SystemExit):  # no checksum file next to it
        artifacts.fetch_kafka(manifest, "9.9.9", "2.13")
    checksum = placed.with_name(placed.name + ".sha512")
    checksum.write_text(f"{hashlib.sha512(b'a half-copied tarball').hexdigest()}  {placed.name}\n")
    with pytest.raises(SystemExit):
        artifacts.fetch_kafka(manifest, "9.9.9", "2.13")
    checksum.write_text(f"{hashlib.sha512(b'the official tarball').hexdigest()}  {placed.name}\n")
    artifacts.fetch_kafka(manifest, "9.9.9", "2.13")
    assert calls == []
    assert manifest.files["kafka/kafka_2.13-9.9.9.tgz"]["source"] == "user"


def test_a_spark_tarball_in_the_cache_replaces_the_wheel(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(artifacts, "maven_closure", _fake_maven(calls))
    monkeypatch.setattr(artifacts, "run", lambda *a, **k: pytest.fail("the wheel must not be built"))
    tree = cache / "build/spark-9.9.9-bin-hadoop3"
    (tree / "jars").mkdir(parents=True)
    (tree / "jars/spark-core_2.13-9.9.9.jar").write_bytes(b"core")
    placed = cache / artifacts.spark_tarball("9.9.9")
    placed.parent.mkdir()
    artifacts.reproducible_tarball(tree, placed)
    digest = hashlib.sha512(placed.read_bytes()).hexdigest()
    placed.with_name(placed.name + ".sha512").write_text(f"{digest}  {placed.name}\n")
    manifest = artifacts.Manifest.load(cache / "MANIFEST.json")
    artifacts.fetch_spark(manifest, "9.9.9", "2.13")
    assert manifest.files[artifacts.spark_tarball("9.9.9")]["source"] == "user"
    assert "spark/spark-kafka-connector_2.13-9.9.9.tgz" in manifest.files
    assert not any(rel.startswith("spark/pyspark-") for rel in manifest.files)


def test_versions_come_from_the_role_defaults() -> None:
    version = role_default("kafka", "kafka_version")
    assert version.startswith("4.")
