"""Contenders timed side by side: rounds that alternate them, and one table of the spread."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def named(text: str) -> tuple[str, str]:
    """A contender given on the command line as NAME=VALUE (an argparse `type`)."""
    name, equals, value = text.partition("=")
    if not name or not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
    return name, value


def alternate(
    contenders: dict[str, Callable[[T], None]], arg: T, rounds: int, n: int, warm: T
) -> dict[str, list[float]]:
    """n items per run / the run's wall clock, per contender and round, after a run of each on
    `warm` (the JIT, the first job's start-up); the rounds alternate the contenders, so the
    machine's noise falls on all of them."""
    for run in contenders.values():
        run(warm)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            started = time.perf_counter()
            run(arg)
            rates[name].append(n / (time.perf_counter() - started))
    return rates


def print_table(rates: dict[str, list[float]], ceiling: str, unit: str = "readings/s") -> None:
    """Median, min and max per contender, and each median's ratio to the `ceiling` contender's."""
    base = statistics.median(rates[ceiling])
    width = max(len(name) for name in rates)
    print(f"| {'contender':<{width}} | {'median ' + unit:>17} | {'min':>9} | {'max':>9} | {'vs peer':>7} |")
    print(f"|{'-' * (width + 2)}|{'-' * 18}:|{'-' * 10}:|{'-' * 10}:|{'-' * 8}:|")
    for name, values in rates.items():
        median = statistics.median(values)
        print(
            f"| {name:<{width}} | {median:17,.0f} | {min(values):9,.0f} | {max(values):9,.0f} | "
            f"{median / base:7.2f} |"
        )
