"""bench.catchup's JVM contenders: each changes one thing of the deployed options."""

from __future__ import annotations

from bench.catchup import JVM_VARIANTS, split_jvm_variant

DEPLOYED = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def test_the_c2_contender_keeps_the_collector_and_lifts_the_jit() -> None:
    assert JVM_VARIANTS["-c2"](DEPLOYED) == [*DEPLOYED, "-XX:TieredStopAtLevel=4"]


def test_the_g1_contender_keeps_the_jit_and_names_one_collector() -> None:
    assert JVM_VARIANTS["-g1"](DEPLOYED) == ["-XX:TieredStopAtLevel=1", "-XX:+UseG1GC"]
    assert JVM_VARIANTS["-g1"](["-XX:TieredStopAtLevel=1"]) == ["-XX:TieredStopAtLevel=1", "-XX:+UseG1GC"]


def test_the_huge_method_contenders_set_the_flag_once_whatever_is_deployed() -> None:
    compiled, interpreted = "-XX:-DontCompileHugeMethods", "-XX:+DontCompileHugeMethods"
    for deployed in (DEPLOYED, [*DEPLOYED, compiled], [*DEPLOYED, interpreted]):
        assert JVM_VARIANTS["-hugejit"](deployed) == [*DEPLOYED, compiled]
        assert JVM_VARIANTS["-hugeint"](deployed) == [*DEPLOYED, interpreted]


def test_a_contender_runs_the_app_its_key_names_without_the_jvm_suffix() -> None:
    assert [split_jvm_variant(k)[0] for k in ("agg", "agg-wide", "agg-c2", "peer-g1", "peer-hugeint")] == [
        "agg",
        "agg-wide",
        "agg",
        "peer",
        "peer",
    ]
    assert split_jvm_variant("agg-wide") == ("agg-wide", None)
    assert split_jvm_variant("peer-hugeint") == ("peer", JVM_VARIANTS["-hugeint"])
