"""Pack what the apps import into one zip for spark-submit --py-files.

The bytes depend only on the sources (fixed timestamps, sorted entries), so a
re-submission with unchanged apps changes nothing on the cluster.

    python spark_apps/bundle.py OUT.zip
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The reading contract, record signing, the failpoints, the durable file operations, the watchdog and
# the broker probe are the agent's own modules, shipped as they are (tests/unit/spark/test_bundle.py
# checks none is missing).
SOURCES = [
    (HERE / "pikit_spark", "pikit_spark"),
    (HERE.parent / "edge_agent/edge_agent/__init__.py", "edge_agent/__init__.py"),
    (HERE.parent / "edge_agent/edge_agent/brokers.py", "edge_agent/brokers.py"),
    (HERE.parent / "edge_agent/edge_agent/contract.py", "edge_agent/contract.py"),
    (HERE.parent / "edge_agent/edge_agent/disk.py", "edge_agent/disk.py"),
    (HERE.parent / "edge_agent/edge_agent/failpoints.py", "edge_agent/failpoints.py"),
    (HERE.parent / "edge_agent/edge_agent/signing.py", "edge_agent/signing.py"),
    (HERE.parent / "edge_agent/edge_agent/watchdog.py", "edge_agent/watchdog.py"),
]


def files() -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    for source, arcname in SOURCES:
        if source.is_dir():
            out += [(p, f"{arcname}/{p.relative_to(source)}") for p in source.rglob("*.py")]
        else:
            out.append((source, arcname))
    return sorted(out, key=lambda item: item[1])


def build(dest: Path) -> None:
    part = dest.with_name(dest.name + ".part")
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path, arcname in files():
            info = zipfile.ZipInfo(arcname, date_time=(2000, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, path.read_bytes())
    part.replace(dest)


if __name__ == "__main__":
    build(Path(sys.argv[1]))
