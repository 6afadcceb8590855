"""A private artifact cache whose Spark is a binary tarball in Apache's layout, for molecule.

Apache's download site is unreachable here, so the spark/default scenario exercises the role's
tarball path (spark_distribution: auto picks a cached tarball) with a stand-in built from the
cached pyspark wheel: `spark-<v>-bin-hadoop3/` with bin, sbin, jars, and python/lib/pyspark.zip
and py4j-<v>-src.zip as Apache ships them. It is placed with its .sha512 as a user would, and
`pikit.artifacts spark` records it. Everything else is linked (or copied) from the shared cache.

    python tests/molecule/spark_tarball_cache.py SHARED_CACHE PRIVATE_CACHE
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Parts of the pyspark package that Apache ships outside python/lib/pyspark.zip.
OUTSIDE_ZIP = ("bin/", "sbin/", "jars/", "examples/", "licenses/", "data/")


def _link_or_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in sorted(members.items()):
            out.writestr(name, data)
    return buffer.getvalue()


def build_tarball(wheel: Path, py4j_wheel: Path, version: str, dest: Path) -> None:
    top = f"spark-{version}-bin-hadoop3"
    package: dict[str, bytes] = {}
    with tarfile.open(dest, "w:gz", compresslevel=1) as tar, zipfile.ZipFile(wheel) as whl:
        for info in whl.infolist():
            if not info.filename.startswith("pyspark/") or info.is_dir():
                continue
            rel = info.filename.removeprefix("pyspark/")
            if rel.startswith(OUTSIDE_ZIP):
                mode = (info.external_attr >> 16) & 0o777 or 0o644
                if rel.startswith(("bin/", "sbin/")):
                    mode |= 0o755
                _add(tar, f"{top}/{rel}", whl.read(info), mode)
            else:
                package[info.filename] = whl.read(info)
        _add(tar, f"{top}/python/lib/pyspark.zip", _zip(package), 0o644)
        with zipfile.ZipFile(py4j_wheel) as py4j:
            members = {n: py4j.read(n) for n in py4j.namelist() if n.startswith("py4j/")}
        py4j_version = py4j_wheel.name.split("-")[1]
        _add(tar, f"{top}/python/lib/py4j-{py4j_version}-src.zip", _zip(members), 0o644)
        release = f"Spark {version} (stand-in built from the pyspark wheel)\n"
        _add(tar, f"{top}/RELEASE", release.encode(), 0o644)


def main(shared: Path, private: Path) -> None:
    manifest = json.loads((shared / "MANIFEST.json").read_text())["files"]
    wheels = sorted(n for n in manifest if n.startswith("spark/pyspark-"))
    py4j = sorted(n for n in manifest if n.startswith("spark/py4j-"))
    assert wheels and py4j, f"{shared}: run `make artifacts` first"
    version = wheels[-1].split("-")[1]
    wheel_only = ("spark/pyspark-", "spark/py4j-")
    keep = {rel: entry for rel, entry in manifest.items() if not rel.startswith(wheel_only)}
    for rel in keep:
        if not (private / rel).exists():
            _link_or_copy(shared / rel, private / rel)
    (private / "MANIFEST.json").write_text(json.dumps({"files": keep}, indent=2) + "\n")
    tarball = private / f"spark/spark-{version}-bin-hadoop3.tgz"
    if not tarball.exists():
        build_tarball(shared / wheels[-1], shared / py4j[-1], version, tarball)
        digest = hashlib.sha512(tarball.read_bytes()).hexdigest()
        tarball.with_name(tarball.name + ".sha512").write_text(f"{digest}  {tarball.name}\n")
    env = {**os.environ, "PIKIT_ARTIFACTS": str(private)}
    subprocess.run([sys.executable, "-m", "pikit.artifacts", "spark"], cwd=REPO, env=env, check=True)
    (private / "READY").write_text(tarball.name + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
