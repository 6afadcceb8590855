"""The reading contract (edge_agent/contract.py) as Spark transformations.

Parsing and validation are Spark SQL expressions, not Python UDFs: a Pi's executor
never starts a Python worker for them. tests/unit/spark checks they accept and
reject exactly what the agent's own `decode_batch` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_agent.contract import (
    NAME_PATTERN,
    READING_FIELDS,
    SCHEMA_VERSION,
    TS_MAX,
    TS_MIN,
    UNIT_MAX_LEN,
)
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

MAX_CLOCK_SKEW_S = 300

# Readings are kept as JSON text first and validated one by one; a dead letter carries
# the record's original bytes and, for one bad reading of a batch, its position.
_ENVELOPE = StructType(
    [
        StructField("schema", LongType()),
        StructField("device", StringType()),
        StructField("readings", ArrayType(StringType())),
    ]
)
_READING = StructType(
    [
        StructField("seq", LongType()),
        StructField("sensor", StringType()),
        StructField("metric", StringType()),
        StructField("value", DoubleType()),
        StructField("unit", StringType()),
        StructField("ts", DoubleType()),
    ]
)
# Spark's JSON reader turns 1.5 into a long and "1" into a double; the contract does not.
_TYPED = {
    "seq": r"^-?[0-9]+$",
    "value": r"^-?[0-9]",
    "ts": r"^-?[0-9]",
}


_DOUBLE_MAX = 1.7976931348623157e308  # between() is false for NaN and both infinities


@dataclass(frozen=True)
class Parsed:
    """The outcome of parsing a stream of Kafka records."""

    readings: DataFrame  # device, seq, sensor, metric, value, unit, ts, event_time
    dead_letters: DataFrame  # key, value (as received), reason, topic, partition, offset, index


def _first_failure(checks: list[tuple[Column, str]]) -> Column:
    """The reason of the first failing check, or null when all pass."""
    out = F.lit(None).cast("string")
    for ok, reason in reversed(checks):
        out = F.when(~F.coalesce(ok, F.lit(False)), F.lit(reason)).otherwise(out)
    return out


def _raw_field(raw: Column, name: str) -> Column:
    return F.get_json_object(raw, f"$.{name}")


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
    env = records.select(
        "key", "value", "topic", "partition", "offset", F.from_json(text, _ENVELOPE).alias("env"),
        F.get_json_object(text, "$.readings").alias("readings_raw"), F.unix_timestamp(now).alias("now_s"),
    )  # fmt: skip
    record_reason = _first_failure(
        [
            (
                F.col("env").isNotNull() & F.col("env.schema").isNotNull(),
                "not a JSON object of the reading contract",
            ),
            (F.col("env.schema") == SCHEMA_VERSION, f"unknown schema (this reader knows {SCHEMA_VERSION})"),
            (F.col("env.device").rlike(NAME_PATTERN), "device must be a short name"),
            (F.col("readings_raw").startswith("["), "readings must be a non-empty list"),
            (F.size("env.readings") > 0, "readings must be a non-empty list"),
        ]
    )
    judged = env.withColumn("record_reason", record_reason)
    bad_records = judged.where(F.col("record_reason").isNotNull()).select(
        "key", "value", F.col("record_reason").alias("reason"), "topic", "partition", "offset",
        F.lit(None).cast("int").alias("index"),
    )  # fmt: skip

    exploded = judged.where(F.col("record_reason").isNull()).select(
        "key", "value", "topic", "partition", "offset", "now_s", F.col("env.device").alias("device"),
        F.posexplode("env.readings").alias("index", "raw"),
    )  # fmt: skip
    raw = F.col("raw")
    reading = F.from_json(raw, _READING)
    checks: list[tuple[Column, str]] = [(raw.startswith("{"), "reading is not an object")]
    for name in READING_FIELDS:
        checks.append((_raw_field(raw, name).isNotNull(), f"reading lacks {name}"))
    checks += [
        (
            _raw_field(raw, "seq").rlike(_TYPED["seq"]) & (reading["seq"] >= 0),
            "seq must be a non-negative integer",
        ),
        (reading["sensor"].rlike(NAME_PATTERN) & _is_string(raw, "sensor"), "sensor must be a short name"),
        (reading["metric"].rlike(NAME_PATTERN) & _is_string(raw, "metric"), "metric must be a short name"),
        (
            _is_string(raw, "unit") & (F.length(reading["unit"]) <= UNIT_MAX_LEN),
            "unit must be a short string",
        ),
        (
            _is_number(raw, "value") & reading["value"].between(-_DOUBLE_MAX, _DOUBLE_MAX),
            "value must be a finite number",
        ),
        (
            _is_number(raw, "ts") & reading["ts"].between(TS_MIN, TS_MAX),
            f"ts must be Unix seconds between {TS_MIN} and {TS_MAX}",
        ),
        (
            reading["ts"] <= F.col("now_s") + max_clock_skew_s,
            f"ts is more than {max_clock_skew_s} s ahead of the time it was processed (device clock?)",
        ),
    ]
    judged_readings = exploded.withColumn("r", reading).withColumn("reason", _first_failure(checks))
    bad_readings = judged_readings.where(F.col("reason").isNotNull()).select(
        "key", "value", "reason", "topic", "partition", "offset", "index"
    )
    good = judged_readings.where(F.col("reason").isNull()).select(
        "device", "r.seq", "r.sensor", "r.metric", "r.value", "r.unit", "r.ts",
        F.timestamp_micros((F.col("r.ts") * 1_000_000).cast("long")).alias("event_time"),
    )  # fmt: skip
    return Parsed(good, bad_records.unionByName(bad_readings))


def _is_string(raw: Column, name: str) -> Column:
    """The field is a JSON string (Spark would also read a number into a string column)."""
    return F.regexp_extract(raw, rf'"{name}"\s*:\s*(")', 1) == '"'


def _is_number(raw: Column, name: str) -> Column:
    """The field is a JSON number, not a string, boolean or NaN token."""
    return F.regexp_extract(raw, rf'"{name}"\s*:\s*(-?[0-9])', 1) != ""


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
