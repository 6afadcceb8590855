"""The judgement of a core's copy while the site goes on writing (pikit_testkit.mirror)."""

from __future__ import annotations

from pikit_testkit.mirror import Records, expected_copy


def _r(*values: str) -> list[tuple[bytes | None, bytes]]:
    return [(None, v.encode()) for v in values]


REFERENCE: Records = {0: _r("a", "b"), 1: _r("x")}
LATER: Records = {0: _r("a", "b", "c", "d"), 1: _r("x", "y")}


def test_a_copy_that_holds_the_reference_and_more_of_what_followed_is_exact() -> None:
    got = {0: _r("a", "b", "c"), 1: _r("x")}
    expected, reached = expected_copy(REFERENCE, got, LATER)
    assert reached and expected == got


def test_a_copy_short_of_the_reference_has_not_reached_it() -> None:
    got = {0: _r("a"), 1: _r("x")}
    expected, reached = expected_copy(REFERENCE, got, LATER)
    assert not reached and expected != got


def test_a_repeated_record_differs_from_the_site() -> None:
    got = {0: _r("a", "b", "b"), 1: _r("x")}
    expected, reached = expected_copy(REFERENCE, got, LATER)
    assert reached and expected != got


def test_a_record_the_site_never_committed_differs() -> None:
    got = {0: _r("a", "b", "c", "d", "e"), 1: _r("x")}
    expected, reached = expected_copy(REFERENCE, got, LATER)
    assert reached and expected != got


def test_a_partition_the_site_lacks_differs() -> None:
    got = {0: _r("a", "b"), 1: _r("x"), 2: _r("q")}
    expected, _ = expected_copy(REFERENCE, got, LATER)
    assert expected != got
