"""Pack what the apps import into one zip for spark-submit --py-files.

The bytes depend only on the sources (fixed timestamps, sorted entries), so a
re-submission with unchanged apps changes nothing on the cluster. The packages come from
the kit checkout this file is in, not from what the running Python has installed: the
spark role runs `<pikit_kit_dir>/spark_apps/bundle.py`, and the bundle is that kit's apps
whichever checkout the venv's editable installs point at.

    python spark_apps/bundle.py OUT.zip
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
# The apps' library and the package they share with the agent and the controller, each whole
# (tests/unit/spark/test_bundle.py checks every module an app imports is in).
PACKAGES = [KIT / "spark_apps" / "pikit_spark", KIT / "contract" / "pikit_contract"]


def files() -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    for root in PACKAGES:
        out += [(p, f"{root.name}/{p.relative_to(root)}") for p in root.rglob("*.py")]
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
