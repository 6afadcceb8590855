"""Per-device event time: each device's windows close on the device's own clock.

Spark's watermark is global: one device that keeps sending moves it on, and another
device's readings spooled during an outage arrive "late" and are lost. Here the stream
is stateless and each micro-batch advances a state of our own (pikit_spark/state.py):

- `windows`: the open windows, as count/mean/M2/min/max per device x sensor x metric x
  window (merged batch by batch with Chan's formulas, so the result is exact);
- `devices`: per device, the highest `seq` seen (a reading at or below it is a resend and
  is dropped: one row per device, not one per reading), its highest event time, and
  `closed_through`, the window end up to which its windows are closed.

Each micro-batch is read once, into a summary whose size follows the windows and the
devices, not the readings (`summarize`); the state, the closed windows, the late readings
and the dead letters are all computed from it.

A device's windows close when its own event time passes their end by `slack_s`, or when
the processing time passes their end by `horizon_s` (a device silent for longer). A
reading for a closed window is late: it is returned with its reason, never dropped
silently. The processing time is the micro-batch's (kept in Spark's offset log), so a
replayed batch computes the same result.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pikit_spark.moments import aggregates, moments, pool
from pikit_spark.seqs import BLOCK_KEY, above_marks, block_aggregates, block_columns, once_per_seq

WINDOWS_SCHEMA = (
    "device string, sensor string, metric string, unit string, window_start long, "
    "n long, mean double, m2 double, min double, max double"
)
DEVICES_SCHEMA = "device string, high_seq long, high_ts double, closed_through long"
STATE_SCHEMAS = {"windows": WINDOWS_SCHEMA, "devices": DEVICES_SCHEMA}
WINDOW_KEY = ["device", "sensor", "metric", "window_start"]
_WINDOWS_COLUMNS = [part.split()[0] for part in WINDOWS_SCHEMA.split(", ")]
LATE_CLOSED = "late: the device's windows up to this one were closed"
LATE_HORIZON = "late: older than the horizon"


@dataclass(frozen=True)
class Timing:
    window_s: int = 60
    slack_s: int = 10  # a device's readings may go this far back in time and still count
    horizon_s: int = 24 * 3600  # how long a silent device's windows wait for it

    def floor(self, seconds: Column) -> Column:
        return (F.floor(seconds / self.window_s) * self.window_s).cast("long")


@dataclass(frozen=True)
class Advance:
    """What one micro-batch produced."""

    closed: DataFrame  # windows closed now: device, sensor, metric, unit, window_start, window_end, count…
    late: DataFrame  # device, seq, sensor, metric, value, unit, ts, reason
    dead: DataFrame  # Parsed.dead_letters' columns (empty for a frame of valid readings only)
    state: dict[str, DataFrame]  # the next version of STATE_SCHEMAS
    # The merged windows, which the state and the closed windows derive from: cached once
    # computed (the batch's summary below them is checkpointed).
    shared: tuple[DataFrame, ...] = ()

    def persist(self) -> Advance:
        for frame in self.shared:
            frame.persist()
        return self

    def unpersist(self) -> None:
        for frame in self.shared:
            frame.unpersist()


# The kinds of row in a batch's summary (see summarize).
ON_TIME, LATE, DEAD = "window", "late", "dead"
_DEAD_COLUMNS = {
    "key": "binary",
    "record": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "long",
    "index": "int",
}


def advance(rows: DataFrame, processed_at: float, state: dict[str, DataFrame], timing: Timing) -> Advance:
    """One micro-batch and the state before it -> closed windows, late readings, dead letters,
    the state after it.

    `rows` are parse()'s verdicts (pikit_spark/readings.py), or valid readings alone (device,
    seq, sensor, metric, value, unit, ts). The batch is read once, by `summarize`, into a
    frame whose size follows the windows and the devices, not the readings; everything else
    is computed from that summary. A resend within the batch (the same device and seq twice)
    is found by the summary's seq blocks; only then are the readings of the devices concerned
    read a second time, deduplicated reading by reading.
    """
    w = timing.window_s
    horizon_end = int((processed_at - timing.horizon_s) // w * w)  # windows ending by then close
    devices = state["devices"]
    # Checkpointed, not cached: the joins below meet the devices' table on both sides, and
    # Spark then re-plans one side, which would no longer match a cache and read the batch again.
    summary = once_per_seq(
        summarize(rows, devices, horizon_end, timing).localCheckpoint(),
        rows,
        lambda again: summarize(again, devices, horizon_end, timing, seq_blocks=False),
        is_block=F.col("kind").isNull(),
    )
    kind = F.col("kind")

    # A window's readings in more than one unit are more than one row of the summary: pooled here.
    parts = F.collect_list(F.struct("n", "mean", "m2"))
    pooled = F.aggregate(F.slice(parts, 2, F.size(parts)), parts[0], pool)
    batch = (
        summary.where(kind == ON_TIME)
        .groupBy(*WINDOW_KEY)
        .agg(
            pooled.alias("p"),
            F.min("min").alias("bmin"),
            F.max("max").alias("bmax"),
            F.max("unit").alias("bunit"),
        )
        .select(
            *WINDOW_KEY,
            F.col("p.n").alias("bn"),
            F.col("p.mean").alias("bmean"),
            F.col("p.m2").alias("bm2"),
            "bmin",
            "bmax",
            "bunit",
        )
    )
    merged = _merge(state["windows"], batch)

    seen = (
        summary.where(kind.isin(ON_TIME, LATE))
        .groupBy("device")
        .agg(F.max("high_seq").alias("bseq"), F.max("high_ts").alias("bts"))
    )
    after = devices.join(seen, "device", "full_outer").select(
        "device",
        F.greatest("high_seq", "bseq").alias("high_seq"),
        F.greatest("high_ts", "bts").alias("high_ts"),
        F.col("closed_through").alias("old_closed"),
    )
    devices_after = after.select(
        "device",
        "high_seq",
        "high_ts",
        F.greatest(
            "old_closed", timing.floor(F.col("high_ts") - timing.slack_s), F.lit(horizon_end).cast("long")
        ).alias("closed_through"),
    )

    flagged = merged.join(devices_after.select("device", "closed_through"), "device", "left").withColumn(
        "is_closed", F.coalesce(F.col("window_start") + w <= F.col("closed_through"), F.lit(False))
    )
    closed = flagged.where("is_closed").select(
        "device",
        "sensor",
        "metric",
        "unit",
        "window_start",
        (F.col("window_start") + w).alias("window_end"),
        F.col("n").alias("count"),
        "min",
        "max",
        "mean",
        F.sqrt(F.greatest(F.col("m2") / F.col("n"), F.lit(0.0))).alias("stddev"),
        F.to_date(F.from_unixtime("window_start")).alias("date"),
    )
    still_open = flagged.where(~F.col("is_closed")).select(*_WINDOWS_COLUMNS)
    # A late reading is a group of its own: its seq, value and ts are the group's.
    seq, value, ts = F.col("high_seq").alias("seq"), F.col("min").alias("value"), F.col("high_ts").alias("ts")
    late = summary.where(kind == LATE).select("device", seq, "sensor", "metric", value, "unit", ts, "reason")
    dead = summary.where(kind == DEAD).select(
        "key", F.col("record").alias("value"), "reason", "topic", "partition", "offset", "index"
    )
    return Advance(
        closed=closed,
        late=late,
        dead=dead,
        state={"windows": still_open, "devices": devices_after},
        shared=(flagged,),
    )


def summarize(
    verdicts: DataFrame, devices: DataFrame, horizon_end: int, timing: Timing, *, seq_blocks: bool = True
) -> DataFrame:
    """One pass over a batch's verdicts (or valid readings alone) -> a small frame, one row per:

    - window of the batch's on-time readings (kind "window"): device, sensor, metric,
      window_start, n, mean, m2, min, max, unit, and the highest seq and ts in it;
    - late reading (kind "late") and dead letter (kind "dead"), each a row of its own,
      with its reason;
    - with `seq_blocks`, block of 64 seqs of a device (kind null): n readings and a bit per
      seq seen (pikit_spark/seqs.py).

    Resends of a seq at or below the device's high-water mark are dropped here. The
    devices' table is small and broadcast: no per-reading row crosses the network, and
    Spark's partial aggregation folds the readings into these rows where they are read.
    """
    marks = devices.select("device", "high_seq", F.col("closed_through").alias("was_closed"))
    rows = above_marks(_as_verdicts(verdicts), marks)  # a dead letter has no device: kept
    window_start = timing.floor(F.col("ts"))
    window_end = window_start + timing.window_s
    closed_before = F.coalesce(window_end <= F.col("was_closed"), F.lit(False))
    too_old = window_end <= horizon_end
    late_reason = F.when(closed_before, F.lit(LATE_CLOSED)).when(too_old, F.lit(LATE_HORIZON))
    dead = F.col("reason").isNotNull()
    kind = F.when(dead, F.lit(DEAD)).when(late_reason.isNotNull(), F.lit(LATE)).otherwise(F.lit(ON_TIME))
    keyed = rows.select(
        "device",
        "seq",
        "sensor",
        "metric",
        "value",
        "unit",
        "ts",
        kind.alias("kind"),
        window_start.alias("window_start"),
        F.coalesce(F.col("reason"), late_reason).alias("reason"),
        # A late reading and a dead letter are each a group of their own.
        F.when(kind == LATE, F.col("seq")).alias("late_seq"),
        F.when(dead, F.struct("topic", "partition", "offset", "index")).alias("dead_at"),
        *block_columns(~dead),
        F.when(dead, F.col("key")).alias("key"),
        F.when(dead, F.col("record")).alias("record"),
    )
    # Every text and byte string is a key, so that each aggregate is a fixed-width number and
    # Spark aggregates in a hash map; a text aggregate (max(unit)) would sort every reading.
    by_window = [
        "kind",
        "device",
        "sensor",
        "metric",
        "unit",
        "window_start",
        "reason",
        "late_seq",
        "dead_at",
        "key",
        "record",
    ]
    grouped = (
        keyed.groupingSets([by_window, BLOCK_KEY], *by_window, "seq_block")
        if seq_blocks
        else keyed.groupBy(*by_window, F.lit(None).cast("long").alias("seq_block"))
    )
    return grouped.agg(
        *aggregates("value"),
        F.min("value").alias("min"),
        F.max("value").alias("max"),
        F.max("seq").alias("high_seq"),
        F.max("ts").alias("high_ts"),
        *block_aggregates(),
    ).select("*", *(F.col("dead_at")[name].alias(name) for name in ("topic", "partition", "offset", "index")))


def _as_verdicts(rows: DataFrame) -> DataFrame:
    """parse()'s verdicts as they are, or valid readings alone with the dead-letter columns null."""
    if "reason" in rows.columns:
        return rows
    missing = [F.lit(None).cast(ddl).alias(name) for name, ddl in _DEAD_COLUMNS.items()]
    return rows.select(*rows.columns, F.lit(None).cast("string").alias("reason"), *missing)


def _merge(windows: DataFrame, batch: DataFrame) -> DataFrame:
    """Chan et al.'s merge of the open windows with this batch's count/mean/M2/min/max."""
    both = windows.join(batch, WINDOW_KEY, "full_outer")
    pooled = pool(moments("n", "mean", "m2"), moments("bn", "bmean", "bm2"))
    return both.select(
        "device",
        "sensor",
        "metric",
        F.coalesce("unit", "bunit").alias("unit"),
        "window_start",
        pooled["n"].alias("n"),
        pooled["mean"].alias("mean"),
        pooled["m2"].alias("m2"),
        F.least("min", "bmin").alias("min"),
        F.greatest("max", "bmax").alias("max"),
    )


def late_records(late: DataFrame) -> DataFrame:
    """Late readings as Kafka records of the reading contract (one reading each), keyed by
    device, with the reason as a header: replayable by anything that reads the readings."""
    reading = F.struct("seq", "sensor", "metric", "value", "unit", "ts")
    value = F.to_json(F.struct(F.lit(1).alias("schema"), "device", F.array(reading).alias("readings")))
    header = F.struct(F.lit("reason").alias("key"), F.col("reason").cast("binary").alias("value"))
    return late.select(
        F.col("device").cast("binary").alias("key"),
        value.cast("binary").alias("value"),
        F.array(header).alias("headers"),
    )
