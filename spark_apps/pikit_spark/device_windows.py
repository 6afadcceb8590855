"""Per-device event time: each device's windows close on the device's own clock.

Spark's watermark is global: one device that keeps sending moves it on, and another
device's readings spooled during an outage arrive "late" and are lost. Here the stream
is stateless and each micro-batch advances a state of our own (pikit_spark/state.py):

- `windows`: the open windows, as count/mean/M2/min/max per device x sensor x metric x
  window (merged batch by batch with Chan's formulas, so the result is exact);
- `devices`: per device, the highest `seq` seen (a reading at or below it is a resend and
  is dropped: one row per device, not one per reading), its highest event time, and
  `closed_through`, the window end up to which its windows are closed.

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

    closed: (
        DataFrame  # windows closed now: device, sensor, metric, unit, window_start, window_end, count, ...
    )
    late: DataFrame  # the readings' columns and `reason`
    state: dict[str, DataFrame]  # the next version of STATE_SCHEMAS
    # The new readings and the merged windows, which the outputs above all derive from:
    # cached once they are first computed, so that writing the state, the windows and the
    # late readings does not dedup the batch and merge the windows once per output.
    shared: tuple[DataFrame, ...] = ()

    def persist(self) -> Advance:
        for frame in self.shared:
            frame.persist()
        return self

    def unpersist(self) -> None:
        for frame in self.shared:
            frame.unpersist()


def advance(readings: DataFrame, processed_at: float, state: dict[str, DataFrame], timing: Timing) -> Advance:
    """One micro-batch of valid readings (device, seq, sensor, metric, value, unit, ts) and
    the state before it -> closed windows, late readings, the state after it."""
    w = timing.window_s
    horizon_end = int((processed_at - timing.horizon_s) // w * w)  # windows ending by then close
    devices = state["devices"]
    fresh = (
        first_seen(readings, devices)
        .join(devices.select("device", F.col("closed_through").alias("was_closed")), "device", "left")
        .withColumn("window_start", timing.floor(F.col("ts")))
    )
    window_end = F.col("window_start") + w
    closed_before = F.coalesce(window_end <= F.col("was_closed"), F.lit(False))
    reason = F.when(closed_before, F.lit(LATE_CLOSED)).when(window_end <= horizon_end, F.lit(LATE_HORIZON))
    fresh = fresh.withColumn("reason", reason)
    late = fresh.where(F.col("reason").isNotNull()).select(*readings.columns, "reason")
    on_time = fresh.where(F.col("reason").isNull())

    batch = on_time.groupBy(*WINDOW_KEY).agg(
        F.count(F.lit(1)).alias("bn"), F.avg("value").alias("bmean"),
        (F.var_pop("value") * F.count(F.lit(1))).alias("bm2"),
        F.min("value").alias("bmin"), F.max("value").alias("bmax"), F.max("unit").alias("bunit"),
    )  # fmt: skip
    merged = _merge(state["windows"], batch)

    seen = fresh.groupBy("device").agg(F.max("seq").alias("bseq"), F.max("ts").alias("bts"))
    after = devices.join(seen, "device", "full_outer").select(
        "device",
        F.greatest("high_seq", "bseq").alias("high_seq"),
        F.greatest("high_ts", "bts").alias("high_ts"),
        F.col("closed_through").alias("old_closed"),
    )
    devices_after = after.select(
        "device", "high_seq", "high_ts",
        F.greatest(
            "old_closed", timing.floor(F.col("high_ts") - timing.slack_s), F.lit(horizon_end).cast("long")
        ).alias("closed_through"),
    )  # fmt: skip

    flagged = merged.join(devices_after.select("device", "closed_through"), "device", "left").withColumn(
        "is_closed", F.coalesce(F.col("window_start") + w <= F.col("closed_through"), F.lit(False))
    )
    closed = flagged.where("is_closed").select(
        "device", "sensor", "metric", "unit", "window_start",
        (F.col("window_start") + w).alias("window_end"),
        F.col("n").alias("count"), "min", "max", "mean",
        F.sqrt(F.greatest(F.col("m2") / F.col("n"), F.lit(0.0))).alias("stddev"),
        F.to_date(F.from_unixtime("window_start")).alias("date"),
    )  # fmt: skip
    still_open = flagged.where(~F.col("is_closed")).select(*_WINDOWS_COLUMNS)
    return Advance(
        closed=closed,
        late=late,
        state={"windows": still_open, "devices": devices_after},
        shared=(fresh, flagged),
    )


def first_seen(readings: DataFrame, devices: DataFrame) -> DataFrame:
    """The readings not seen before: one per (device, seq), above the device's high `seq`.

    A device's readings arrive in `seq` order (one partition per device, an idempotent
    producer), so a reading at or below the mark is a resend after an agent crash.
    """
    marks = devices.select("device", "high_seq")
    unique = readings.dropDuplicates(["device", "seq"])
    above = F.col("high_seq").isNull() | (F.col("seq") > F.col("high_seq"))
    return unique.join(marks, "device", "left").where(above).drop("high_seq")


def seq_marks(devices: DataFrame, fresh: DataFrame) -> DataFrame:
    """Each device's highest `seq` after this batch (resends at or below it are dropped)."""
    seen = fresh.groupBy("device").agg(F.max("seq").alias("bseq"))
    return devices.join(seen, "device", "full_outer").select(
        "device", F.greatest("high_seq", "bseq").alias("high_seq")
    )


def _merge(windows: DataFrame, batch: DataFrame) -> DataFrame:
    """Chan et al.'s merge of the open windows with this batch's count/mean/M2/min/max."""
    both = windows.join(batch, WINDOW_KEY, "full_outer")
    an, bn = F.coalesce("n", F.lit(0)), F.coalesce("bn", F.lit(0))
    amean, bmean = F.coalesce("mean", F.lit(0.0)), F.coalesce("bmean", F.lit(0.0))
    n = an + bn
    delta = bmean - amean
    return both.select(
        "device", "sensor", "metric",
        F.coalesce("unit", "bunit").alias("unit"), "window_start",
        n.alias("n"),
        (amean + delta * bn / n).alias("mean"),
        (F.coalesce("m2", F.lit(0.0)) + F.coalesce("bm2", F.lit(0.0)) + delta * delta * an * bn / n)
        .alias("m2"),
        F.least("min", "bmin").alias("min"), F.greatest("max", "bmax").alias("max"),
    )  # fmt: skip


def late_records(late: DataFrame) -> DataFrame:
    """Late readings as Kafka records of the reading contract (one reading each), keyed by
    device, with the reason as a header: replayable by anything that reads the readings."""
    reading = F.struct("seq", "sensor", "metric", "value", "unit", "ts")
    value = F.to_json(F.struct(F.lit(1).alias("schema"), "device", F.array(reading).alias("readings")))
    header = F.struct(F.lit("reason").alias("key"), F.col("reason").cast("binary").alias("value"))
    return late.select(
        F.col("device").cast("binary").alias("key"), value.cast("binary").alias("value"),
        F.array(header).alias("headers"),
    )  # fmt: skip
