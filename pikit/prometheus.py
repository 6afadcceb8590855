"""Reading Prometheus text exposition (format 0.0.4), as the kit's exporters serve it.

Used by `pikit status` and by the tests that scrape the lab: a small parser, not a client library.
"""

from __future__ import annotations

import math
import re
import urllib.request
from dataclasses import dataclass, field

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str] = field(hash=False)
    value: float


def _unescape(text: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _ESCAPES[m.group(0)], text)


def _value(text: str) -> float:
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    return special[text] if text in special else float(text)


def parse(text: str) -> list[Sample]:
    """Every sample of an exposition; comments and blank lines are skipped, a malformed line
    raises ValueError naming it."""
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise ValueError(f"line {number} is not a Prometheus sample: {line[:120]!r}")
        raw_labels = match["labels"] or ""
        labels = {key: _unescape(value) for key, value in _LABEL.findall(raw_labels)}
        samples.append(Sample(match["name"], labels, _value(match["value"])))
    return samples


def scrape(url: str, timeout: float = 10.0) -> list[Sample]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return parse(response.read().decode())


def values(samples: list[Sample], name: str, **labels: str) -> list[float]:
    """The values of the samples called `name` whose labels include `labels`."""
    return [
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The one sample called `name` with `labels`; None when absent (absent is not zero)."""
    found = values(samples, name, **labels)
    if len(found) > 1:
        raise ValueError(f"{len(found)} samples of {name} {labels}: name more labels")
    return found[0] if found else None
