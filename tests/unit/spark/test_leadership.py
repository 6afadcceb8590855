"""Who the drivers' election gives an app to (pikit_spark/leadership.py)."""

from __future__ import annotations

from pikit_spark.leadership import Claim, choose


def test_the_holder_keeps_the_app_whatever_the_ranks() -> None:
    assert choose({"a": Claim(0), "b": Claim(1, held_since=4)}) == "b"


def test_with_no_holder_the_first_ranked_pi_gets_it() -> None:
    assert choose({"b": Claim(1), "a": Claim(0), "c": Claim(2)}) == "a"


def test_of_two_claims_the_newer_wins() -> None:
    # One holder was cut off and replaced; it comes back still claiming the app.
    assert choose({"old": Claim(0, held_since=3), "new": Claim(1, held_since=9)}) == "new"


def test_a_member_of_another_release_is_last_in_line() -> None:
    assert Claim.decode(b"not json") == Claim(rank=1 << 30)
    assert choose({"x": Claim.decode(b""), "a": Claim(5)}) == "a"
    assert Claim.decode(Claim(2, 7).encode()) == Claim(2, 7)
