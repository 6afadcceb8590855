"""`pikit status` finds the topics a mirror copies from its connector's `topics` setting, a list of
regular expressions, as MirrorMaker 2 reads it."""

from __future__ import annotations

import re

from pikit.status import mirrored_topics

SITE = {
    "sensor-aggregates",
    "sensor-alerts",
    "sensor-readings",
    "sensor-aggregates-old",
    "__consumer_offsets",
}


def test_the_escaped_names_the_kit_writes_match_those_topics_only() -> None:
    written = ",".join(re.escape(t) for t in ("sensor-aggregates", "sensor-alerts", "sensor.late"))
    # sensor.late is not on this site; its escaped dot does not match any other name either
    assert mirrored_topics(written, SITE | {"sensor-late"}) == ["sensor-aggregates", "sensor-alerts"]


def test_a_users_pattern_matches_whole_names_and_never_an_internal_topic() -> None:
    assert mirrored_topics("sensor-a.*, __.*", SITE) == [
        "sensor-aggregates",
        "sensor-aggregates-old",
        "sensor-alerts",
    ]
    assert mirrored_topics("sensor", SITE) == [], "a pattern matches a whole name, not a part of one"
    assert mirrored_topics("", SITE) == []
