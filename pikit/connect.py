"""The connect role's mirror lag probe, importable by controller tools and tests: the script the
role installs on its workers (roles/connect/files/pikit_mirror_lag.py), so that `pikit status`
and the benches measure as the workers do rather than with a copy."""

from __future__ import annotations

from pikit import REPO
from pikit.modules import from_file

mirror_lag = from_file("pikit_mirror_lag", REPO / "roles/connect/files/pikit_mirror_lag.py", register=True)
