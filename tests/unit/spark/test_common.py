"""The apps' shared command line: the trigger option."""

from __future__ import annotations

from pikit_spark.common import AVAILABLE_NOW, streaming_parser, trigger


def test_trigger_is_an_interval_by_default() -> None:
    args = streaming_parser("t", "app").parse_args([])
    assert trigger(args) == {"processingTime": "10 seconds"}


def test_available_now_processes_the_backlog_then_stops() -> None:
    args = streaming_parser("t", "app").parse_args(["--trigger", AVAILABLE_NOW])
    assert trigger(args) == {"availableNow": True}
