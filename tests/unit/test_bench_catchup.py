"""bench.catchup's JVM contenders: each changes one thing of the deployed options."""

from __future__ import annotations

from bench.catchup import JVM_VARIANTS

DEPLOYED = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def test_the_c2_contender_keeps_the_collector_and_lifts_the_jit() -> None:
    assert JVM_VARIANTS["-c2"](DEPLOYED) == [*DEPLOYED, "-XX:TieredStopAtLevel=4"]


def test_the_g1_contender_keeps_the_jit_and_names_one_collector() -> None:
    assert JVM_VARIANTS["-g1"](DEPLOYED) == ["-XX:TieredStopAtLevel=1", "-XX:+UseG1GC"]
    assert JVM_VARIANTS["-g1"](["-XX:TieredStopAtLevel=1"]) == ["-XX:TieredStopAtLevel=1", "-XX:+UseG1GC"]
