"""The reading contract (edge_agent/contract.py) as Spark transformations.

Each record is parsed once, into a VARIANT (`try_parse_json`), and every check reads
typed values out of it: no field is looked up in the JSON text again. The variant keeps
each value's JSON type, so the contract's type rules (a seq is an integer, a sensor a
string) hold exactly, which Spark's JSON reader with a schema would not (it turns 5 into
"5" and 1.5 into 1). Everything is a Spark SQL expression, not a Python UDF: a Pi's
executor never starts a Python worker for them. tests/unit/spark checks they accept and
reject exactly what the agent's own `decode_envelope`/`validate_reading` do, reason for
reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_agent.contract import (
    BAD_DEVICE,
    BAD_SEQ,
    BAD_TS,
    BAD_UNIT,
    BAD_VALUE,
    NAME_PATTERN,
    NO_READINGS,
    NOT_AN_OBJECT,
    NOT_JSON,
    READING_FIELDS,
    READING_NOT_AN_OBJECT,
    SCHEMA_VERSION,
    TS_MAX,
    TS_MIN,
    UNIT_MAX_LEN,
    UNKNOWN_SCHEMA,
    bad_name,
    lacks,
)
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

MAX_CLOCK_SKEW_S = 300
_DOUBLE_MAX = 1.7976931348623157e308  # between() is false for NaN and both infinities


def too_far_ahead(max_clock_skew_s: int) -> str:
    return f"ts is more than {max_clock_skew_s} s ahead of the time it was processed (device clock?)"


@dataclass(frozen=True)
class Parsed:
    """The outcome of parsing a stream of Kafka records: one verdict per reading (per record
    for a record that breaks the contract), from which both outputs are projections."""

    verdicts: DataFrame

    @property
    def readings(self) -> DataFrame:
        """device, seq, sensor, metric, value, unit, ts, event_time"""
        return self.verdicts.where(F.col("reason").isNull()).select(*_READING_COLUMNS)

    @property
    def dead_letters(self) -> DataFrame:
        """key, value (as received), reason, topic, partition, offset, index (None: the record)"""
        dead = self.verdicts.where(F.col("reason").isNotNull())
        return dead.select(
            "key", F.col("record").alias("value"), "reason", "topic", "partition", "offset", "index"
        )

    def persist(self) -> Parsed:
        """Keep the verdicts for a micro-batch that reads both outputs: one parse, not one each."""
        return Parsed(self.verdicts.persist())

    def unpersist(self) -> None:
        self.verdicts.unpersist()


_READING_COLUMNS = ("device", "seq", "sensor", "metric", "value", "unit", "ts", "event_time")


def _first_failure(checks: list[tuple[Column, str]]) -> Column:
    """The reason of the first failing check, or null when all pass."""
    out = F.lit(None).cast("string")
    for ok, reason in reversed(checks):
        out = F.when(~F.coalesce(ok, F.lit(False)), F.lit(reason)).otherwise(out)
    return out


class _Variant:
    """Typed looks into one variant value (a record or a reading)."""

    def __init__(self, v: Column) -> None:
        self.v = v

    def field(self, name: str) -> Column:
        return F.variant_get(self.v, f"$.{name}", "variant")

    def type_of(self, name: str) -> Column:
        # BIGINT, DOUBLE, DECIMAL(p,s), STRING, BOOLEAN, VOID (null), OBJECT<..>, ARRAY<..>
        return F.schema_of_variant(self.field(name))

    def get(self, name: str, ddl: str) -> Column:
        return F.try_variant_get(self.v, f"$.{name}", ddl)

    def is_object(self) -> Column:
        # Walks the whole value: only ever reached for what already failed a cheaper check.
        return F.schema_of_variant(self.v).startswith("OBJECT")

    def is_string(self, name: str) -> Column:
        return self.type_of(name) == "STRING"

    def is_number(self, name: str) -> Column:
        kind = self.type_of(name)
        return kind.isin("BIGINT", "DOUBLE") | kind.startswith("DECIMAL")


def parse(records: DataFrame, max_clock_skew_s: int = MAX_CLOCK_SKEW_S) -> Parsed:
    """Kafka records (key, value, topic, partition, offset) -> valid readings and dead letters.

    A reading stamped more than `max_clock_skew_s` ahead of the time Spark processes it (a
    device with a wrong clock) is a dead letter: accepted, it would close the device's
    windows ahead of time. In a stream, the processing time is the
    micro-batch's timestamp, which Spark keeps in its offset log, so a replay decides alike.
    """
    text = F.col("value").cast("string")
    # In a stream, a `processed_at` column set before foreachBatch holds the batch's timestamp.
    now = F.col("processed_at") if "processed_at" in records.columns else F.current_timestamp()
    parsed = records.select(
        "key", "value", "topic", "partition", "offset", F.unix_timestamp(now).alias("now_s"),
        F.when(F.is_valid_utf8(text), F.try_parse_json(text)).alias("v"),
    )  # fmt: skip
    env = _Variant(F.col("v"))
    device_ok = env.is_string("device") & env.get("device", "string").rlike(NAME_PATTERN)
    schema_ok = F.coalesce(
        (env.type_of("schema") == "BIGINT") & (env.get("schema", "long") == SCHEMA_VERSION), F.lit(False)
    )
    readings = env.get("readings", "array<variant>")
    readings_ok = F.coalesce(F.size(readings) > 0, F.lit(False))
    record_reason = (
        F.when(F.col("v").isNull(), F.lit(NOT_JSON))
        .when(schema_ok & device_ok & readings_ok, F.lit(None))
        .when(~env.is_object(), F.lit(NOT_AN_OBJECT))
        .when(~schema_ok, F.lit(UNKNOWN_SCHEMA))
        .when(~F.coalesce(device_ok, F.lit(False)), F.lit(BAD_DEVICE))
        .otherwise(F.lit(NO_READINGS))
    )
    # A record that breaks the contract gives one row (index and reading null), a good one a
    # row per reading.
    exploded = parsed.select(
        "key", "value", "topic", "partition", "offset", "now_s", record_reason.alias("record_reason"),
        env.get("device", "string").alias("device"),
        F.posexplode_outer(F.when(record_reason.isNull(), readings)).alias("index", "r"),
    )  # fmt: skip
    r = _Variant(F.col("r"))
    ts = r.get("ts", "double")
    checks: list[tuple[Column, str]] = [
        # A reading with a seq is an object; only one without is looked at as a whole.
        (r.field("seq").isNotNull() | r.is_object(), READING_NOT_AN_OBJECT),
        *((r.field(name).isNotNull(), lacks(name)) for name in READING_FIELDS),
        ((r.type_of("seq") == "BIGINT") & (r.get("seq", "long") >= 0), BAD_SEQ),
        *(
            (r.is_string(name) & r.get(name, "string").rlike(NAME_PATTERN), bad_name(name))
            for name in ("sensor", "metric")
        ),
        (r.is_string("unit") & (F.length(r.get("unit", "string")) <= UNIT_MAX_LEN), BAD_UNIT),
        (r.is_number("value") & r.get("value", "double").between(-_DOUBLE_MAX, _DOUBLE_MAX), BAD_VALUE),
        (r.is_number("ts") & ts.between(TS_MIN, TS_MAX), BAD_TS),
        (ts <= F.col("now_s") + max_clock_skew_s, too_far_ahead(max_clock_skew_s)),
    ]
    reason = F.coalesce(F.col("record_reason"), _first_failure(checks))
    judged = exploded.withColumn("reason", reason)
    good = F.col("reason").isNull()

    def when_good(column: Column, name: str) -> Column:
        return F.when(good, column).alias(name)

    def when_dead(name: str) -> Column:
        # A dead letter keeps its record's bytes; a good reading does not carry them along.
        return F.when(~good, F.col(name))

    verdicts = judged.select(
        "reason", "index", "topic", "partition", "offset", when_dead("key").alias("key"),
        when_dead("value").alias("record"), when_good(F.col("device"), "device"),
        when_good(r.get("seq", "long"), "seq"), when_good(r.get("sensor", "string"), "sensor"),
        when_good(r.get("metric", "string"), "metric"), when_good(r.get("value", "double"), "value"),
        when_good(r.get("unit", "string"), "unit"), when_good(ts, "ts"),
        when_good(F.timestamp_micros((ts * 1_000_000).cast("long")), "event_time"),
    )  # fmt: skip
    return Parsed(verdicts)


def dead_letter_records(dead: DataFrame) -> DataFrame:
    """Dead letters as Kafka records: the original bytes as the value; why, whence and (for one
    bad reading of a batch) which reading as headers."""

    def header(name: str, value: Column) -> Column:
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    headers = F.array(
        header("reason", F.col("reason")),
        header("source", F.format_string("%s/%d/%d", "topic", "partition", "offset")),
        header("reading", F.col("index").cast("string")),
    )
    return dead.select("key", "value", F.filter(headers, lambda h: h["value"].isNotNull()).alias("headers"))
