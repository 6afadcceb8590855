"""bench.batch_cost's split of a window's latency: the device's own wait, then the apps' part."""

from __future__ import annotations

from bench.batch_cost import WINDOW_S, closing_to_aggregate


def test_the_closing_record_is_the_first_sent_past_the_windows_end_and_the_slack() -> None:
    # A device sending a record every 10 s; its window [0, 60) closes with the first record
    # stamped at or past 60 + 8.
    records = {"bench-1": [float(t) for t in range(5, 200, 10)]}
    windows = {("bench-1", 0): 90.0, ("bench-1", 60): 150.0, ("bench-2", 0): 90.0}
    assert closing_to_aggregate(windows, records, slack=8) == [90.0 - 75, 150.0 - 135]
    assert WINDOW_S == 60


def test_a_window_whose_closing_record_was_never_sent_is_left_out() -> None:
    assert closing_to_aggregate({("bench-1", 0): 90.0}, {"bench-1": [5.0, 15.0]}, slack=8) == []
