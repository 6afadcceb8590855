from collections.abc import Sequence

from pikit_spark.presence import presence
from pikit_spark.state import TableRow


def run(
    batches: Sequence[tuple[float, set[str]]], silent_after: float = 60.0
) -> list[tuple[float, str, str]]:
    state: list[TableRow] = []
    out = []
    for at, seen in batches:
        alerts, state = presence(seen, at, state, silent_after)
        out += [(a["ts"], a["device"], a["reason"].split(":")[0]) for a in alerts]
    return out


def test_one_alert_when_a_device_goes_quiet_and_one_when_it_is_back() -> None:
    batches = [(t, {"a", "b"}) for t in (0, 10, 20)]
    batches += [(t, {"a"}) for t in range(30, 200, 10)]  # b quiet from 20 s on
    batches += [(200, {"a", "b"}), (210, {"a", "b"})]
    assert run(batches) == [(80, "b", "silent"), (200, "b", "back")]


def test_a_gap_shorter_than_the_threshold_raises_nothing() -> None:
    batches = [(0, {"a", "b"}), (30, {"a"}), (59, {"a"}), (70, {"a", "b"})]
    assert run(batches) == []


def test_the_alert_carries_the_silence_and_a_replay_decides_alike() -> None:
    state: list[TableRow] = [("a", 100.0, False), ("b", 20.0, False)]
    first = presence({"a"}, 110.0, state, 60.0)
    assert first == presence({"a"}, 110.0, state, 60.0)
    (alert,) = first[0]
    assert (alert["device"], alert["metric"], alert["value"], alert["unit"]) == ("b", "presence", 90.0, "s")
    assert first[1] == [("a", 110.0, False), ("b", 20.0, True)]


def test_a_new_device_is_known_from_its_first_batch() -> None:
    alerts, state = presence({"c"}, 5.0, [], 60.0)
    assert alerts == [] and state == [("c", 5.0, False)]
