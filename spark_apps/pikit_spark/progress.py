"""Each micro-batch of each query, one log line: what a Pi operator watches in journald."""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener

from pikit_spark.common import LOG


class _ProgressLog(StreamingQueryListener):
    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        LOG.info("query %s started (id %s)", event.name, event.id)

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        p = event.progress
        if p.numInputRows or p.batchId % 30 == 0:
            durations = dict(p.durationMs or {})
            total = durations.pop("triggerExecution", 0)
            # Spark's own steps around the batch function (addBatch): where a slow trigger went.
            slowest = sorted(durations.items(), key=lambda d: -d[1])
            parts = ", ".join(f"{step} {ms}" for step, ms in slowest if ms)
            LOG.info(
                "query %s batch %d: %d rows in, %.1f rows/s, %d ms (%s)",
                p.name,
                p.batchId,
                p.numInputRows,
                p.processedRowsPerSecond or 0.0,
                total,
                parts,
            )

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        LOG.warning("query %s terminated%s", event.id, f": {event.exception}" if event.exception else "")


def log_progress(spark: SparkSession) -> None:
    spark.streams.addListener(_ProgressLog())


class Steps:
    """The wall time of each step of one micro-batch, for one log line: where a slow batch went."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.parts: list[tuple[str, float]] = []

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.parts.append((step, now - self.last))
        self.last = now

    def __str__(self) -> str:
        steps = ", ".join(f"{step} {seconds:.1f}s" for step, seconds in self.parts)
        return f"{steps}; total {time.monotonic() - self.started:.1f}s"
