"""Feature levels: reported, and raised (an upgrade's finalize), never lowered."""

from __future__ import annotations

import time
from typing import Any


def finalized_features(admin: Any) -> dict[str, int]:
    """{feature: finalized level} as the brokers report it (ApiVersions)."""
    described = admin.describe_features()
    return {name: int(info["finalized"][1]) for name, info in described.items() if "finalized" in info}


def features_to_raise(finalized: dict[str, int], wanted: dict[str, int]) -> dict[str, int]:
    """The wanted levels above the finalized ones: raising is all finalize does, never lowering."""
    return {name: int(level) for name, level in sorted(wanted.items()) if int(level) > finalized.get(name, 0)}


def raise_features(admin: Any, wanted: dict[str, int], check: bool) -> dict[str, Any]:
    before = finalized_features(admin)
    to_raise = features_to_raise(before, wanted)
    if not to_raise or check:
        return {"changed": bool(to_raise), "features_before": before, "features": before, "raised": to_raise}
    outcome = admin.update_features(to_raise)
    refused = {name: result for name, result in outcome.items() if result != "OK"}
    if refused:
        return {
            "changed": False,
            "failed": True,
            "msg": f"feature upgrade refused: {refused}",
            "features": before,
        }
    deadline = time.monotonic() + 60
    after = finalized_features(admin)
    while features_to_raise(after, to_raise) and time.monotonic() < deadline:
        time.sleep(1)  # the brokers learn the new levels from the metadata log
        after = finalized_features(admin)
    result = {"changed": True, "features_before": before, "features": after, "raised": to_raise}
    if features_to_raise(after, to_raise):
        result.update(failed=True, msg=f"the brokers still report {after} a minute after raising {to_raise}")
    return result
