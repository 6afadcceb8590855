"""The reading contract (pikit_contract/readings.py) as Spark transformations.

A record in the agent's own form is read by Spark's JSON reader straight into the
contract's types, at a plain parser's speed; any other record is parsed once into a
VARIANT, whose values keep their JSON types, so the contract's type rules (a seq is an
integer, a sensor a string) hold exactly where Spark's reader would turn 5 into "5".
No field is looked up in the JSON text again. Both versions of the contract the apps read
(SCHEMAS_READ) take both paths: a version 2 record's ts, integer milliseconds, becomes
seconds as the agent's contract makes it (ms / 1000). Everything is a Spark SQL expression, not a
Python UDF: a Pi's executor never starts a Python worker for them. tests/unit/spark checks
that both paths accept and reject exactly what the agent's own
`decode_envelope`/`validate_reading` do, reason for reason."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pikit_contract.readings import (
    BAD_DEVICE,
    BAD_SEQ,
    BAD_TS,
    BAD_TS_MS,
    BAD_UNIT,
    BAD_VALUE,
    NAME_PATTERN,
    NO_READINGS,
    NOT_AN_OBJECT,
    NOT_JSON,
    READING_FIELDS,
    READING_NOT_AN_OBJECT,
    SCHEMAS_READ,
    TS_MAX,
    TS_MIN,
    TS_MS_MAX,
    TS_MS_MIN,
    UNIT_MAX_LEN,
    UNKNOWN_SCHEMA,
    bad_name,
    lacks,
)
from pikit_contract.signing import (
    BAD_MAC,
    FORGED,
    MAC_HEADER,
    MISPLACED,
    REVOKED,
    SIGNER_HEADER,
    UNKNOWN_SIGNER,
    UNSIGNED,
    Fence,
    Keyring,
    home_partition,
)
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pikit_spark.batch_values import at_most, whole_seconds
from pikit_spark.local_table import local_table
from pikit_spark.sink import Record

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


# The typed fast path: Spark's JSON reader straight into these types, as a plain parser would.
_FAST_READING = "struct<seq:bigint,sensor:string,metric:string,value:double,unit:string,ts:double>"
_FAST_RECORD = f"struct<schema:bigint,device:string,readings:array<{_FAST_READING}>>"
# Strict JSON, as Python's json module reads it: no NaN/Infinity tokens, no single quotes.
_STRICT_JSON = {"allowNonNumericNumbers": "false", "allowSingleQuotes": "false", "mode": "PERMISSIVE"}
# The typed reader reads what the contract reads only in a text in the agent's own form
# (encode_batch): its keys in its order, no whitespace, numbers in JSON's grammar with an
# integer part that fits a long, strings without raw control characters and without escapes
# of UTF-16 surrogates. Such a text is one JSON object without duplicate keys whose string
# fields hold strings (the typed reader would read 5 as "5" and ignore text after the
# object), which both parsers decode alike. Invalid UTF-8 becomes U+FFFD when the text is
# matched, which the form refuses too. The form also holds the contract's rules on seq,
# names and unit, so the typed path checks only the numbers. Any other text, and any record
# with one reading that breaks those rules, takes the exact path.
_CHAR = (
    r'(?:[^"\\\x00-\x1f\ufffd]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))'
)
_INT = r"-?(?:0|[1-9][0-9]{0,17})"
_FIELD_FORMS = {
    "seq": r"(?:0|[1-9][0-9]{0,17})",
    "sensor": f'"{NAME_PATTERN.removeprefix("^").removesuffix("$")}"',
    "metric": f'"{NAME_PATTERN.removeprefix("^").removesuffix("$")}"',
    "value": _INT + r"(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?",
    "unit": f'"{_CHAR}{{0,{UNIT_MAX_LEN}}}+"',
}
# ts: a number of seconds in version 1, an integer of milliseconds in version 2.
_TS_FORMS = {1: _FIELD_FORMS["value"], 2: _INT}


def _reading_form(schema: int) -> str:
    forms = {**_FIELD_FORMS, "ts": _TS_FORMS[schema]}
    return r"\{" + ",".join(f'"{name}":{forms[name]}' for name in READING_FIELDS) + r"\}"


def _record_form(schema: int) -> str:
    reading = _reading_form(schema)
    return rf'{schema},"device":{_FIELD_FORMS["sensor"]},"readings":\[{reading}(?:,{reading})*+\]'


_AGENT_FORM = rf'^\{{"schema":(?:{"|".join(_record_form(v) for v in SCHEMAS_READ)})\}}\z'
# Java's regex recurses once per reading: a text this long takes the exact path, not the stack.
_AGENT_FORM_MAX_BYTES = 256 * 1024


def parse(
    records: DataFrame,
    max_clock_skew_s: int = MAX_CLOCK_SKEW_S,
    keys: Keyring | Mapping[str, bytes] | None = None,
    partitions: int | None = None,
) -> Parsed:
    """Kafka records (key, value, topic, partition, offset) -> valid readings and dead letters.

    With `keys` (device id -> key, or a Keyring with revoked devices, pikit_contract/signing.py),
    the records also need their `headers`, and a record counts only when its MAC is valid for
    its signer, its signer was not revoked at the record's offset, and its `device` is that
    signer; else it is a dead letter whose reason names the signer. With the readings topic's
    count of `partitions` as well, a record must also lie in its signer's partition
    (`signing.misplaced_reason`).

    Two paths give the same verdicts (tests/unit/spark compare both with the agent's contract,
    reason for reason). A record in the agent's own form (_AGENT_FORM: what encode_batch
    writes, with seq, names and unit as the contract wants them) takes the typed path: Spark's
    JSON reader reads it into the contract's types and only the numbers are checked. Any other
    record, including every one that breaks the contract as a whole, takes the exact path: one
    VARIANT parse, each field's JSON type checked.

    A reading stamped more than `max_clock_skew_s` ahead of the time Spark processes it (a
    device with a wrong clock) is a dead letter: accepted, it would close the device's
    windows ahead of time. In a stream, the processing time is the
    micro-batch's timestamp, which Spark keeps in its offset log, so a replay decides alike.
    """
    # Python's json keeps the last of duplicate keys; Spark's VARIANT parser refuses them unless told.
    records.sparkSession.conf.set("spark.sql.variant.allowDuplicateKeys", "true")
    text = F.col("value").cast("string")
    # In a stream, a `processed_at` column set before foreachBatch holds the batch's timestamp.
    now = F.col("processed_at") if "processed_at" in records.columns else F.current_timestamp()
    records, signature_reason = _signatures(records, keys, partitions)
    typed = records.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "signer",
        "home",
        signature_reason.alias("signature_reason"),
        whole_seconds(F.unix_timestamp(now) + max_clock_skew_s).alias("latest_ts"),
        text.alias("text"),
        F.when(in_agent_form(text), F.from_json(text, _FAST_RECORD, _STRICT_JSON)).alias("j"),
    )
    j = F.col("j")
    fast = j["readings"].isNotNull()
    parsed = typed.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "signer",
        "home",
        "signature_reason",
        "latest_ts",
        "j",
        fast.alias("fast"),
        F.when(~fast & F.is_valid_utf8(F.col("text")), _one_json_value(F.col("text"))).alias("v"),
    )
    fast = F.col("fast")
    env = _Variant(F.col("v"))
    device_ok = env.is_string("device") & env.get("device", "string").rlike(NAME_PATTERN)
    schema_ok = F.coalesce(
        (env.type_of("schema") == "BIGINT") & env.get("schema", "long").isin(*SCHEMAS_READ), F.lit(False)
    )
    readings = env.get("readings", "array<variant>")
    readings_ok = F.coalesce(F.size(readings) > 0, F.lit(False))
    contract_reason = (
        F.when(fast, F.lit(None))
        .when(F.col("v").isNull(), F.lit(NOT_JSON))
        .when(schema_ok & device_ok & readings_ok, F.lit(None))
        .when(~env.is_object(), F.lit(NOT_AN_OBJECT))
        .when(~schema_ok, F.lit(UNKNOWN_SCHEMA))
        .when(~F.coalesce(device_ok, F.lit(False)), F.lit(BAD_DEVICE))
        .otherwise(F.lit(NO_READINGS))
    )
    claimed = F.when(fast, j["device"]).otherwise(env.get("device", "string"))
    forged = F.when(
        F.col("signer").isNotNull() & (claimed != F.col("signer")), _naming(FORGED, F.col("signer"))
    )
    misplaced = F.when(F.col("partition") != F.col("home"), _naming(MISPLACED, F.col("signer")))
    record_reason = F.coalesce(F.col("signature_reason"), contract_reason, forged, misplaced)
    # Two explodes, one per path, so that neither path's readings are copied: a record explodes
    # into its readings on its own path and into one row of nulls on the other. A record that
    # breaks the contract gives one row (index and reading null), a good one a row per reading.
    schema = F.when(fast, j["schema"]).otherwise(env.get("schema", "long"))
    may_hold_dead = ~fast | ~_numbers_all_good(j["readings"], schema) | record_reason.isNotNull()
    typed_rows = parsed.select(
        "key",
        F.when(may_hold_dead, F.col("value")).alias("value"),
        "topic",
        "partition",
        "offset",
        "latest_ts",
        "fast",
        "v",
        record_reason.alias("record_reason"),
        claimed.alias("device"),
        schema.alias("schema"),
        F.posexplode_outer(F.when(fast & record_reason.isNull(), j["readings"])).alias("typed_index", "f"),
    )
    exact_readings = F.when(~fast & F.col("record_reason").isNull(), readings)
    exploded = typed_rows.select(
        "*", F.posexplode_outer(exact_readings).alias("exact_index", "r")
    ).withColumn("index", F.coalesce("typed_index", "exact_index"))
    f = F.col("f")
    r = _Variant(F.col("r"))
    v2 = F.col("schema") == 2
    # As written: seconds (version 1) or milliseconds (version 2); a long's milliseconds are exact
    # as a double (< 2**53), and seconds = ms / 1000 is the double Python's int / 1000 gives.
    exact_ts = F.when(v2, r.get("ts", "long").cast("double")).otherwise(r.get("ts", "double"))
    ts = F.when(v2, F.when(fast, f["ts"]).otherwise(exact_ts) / 1000).otherwise(
        F.when(fast, f["ts"]).otherwise(exact_ts)
    )
    number_checks = _number_checks(f["value"], f["ts"], v2, max_clock_skew_s)
    type_checks: list[tuple[Column, str]] = [
        # A reading with a seq is an object; only one without is looked at as a whole.
        (r.field("seq").isNotNull() | r.is_object(), READING_NOT_AN_OBJECT),
        *((r.field(name).isNotNull(), lacks(name)) for name in READING_FIELDS),
        ((r.type_of("seq") == "BIGINT"), BAD_SEQ),
        *((r.is_string(name), bad_name(name)) for name in ("sensor", "metric")),
        (r.is_string("unit"), BAD_UNIT),
        (r.is_number("value"), BAD_VALUE),
        (v2 | r.is_number("ts"), BAD_TS),
        (~v2 | (r.type_of("ts") == "BIGINT"), BAD_TS_MS),
    ]
    # On the exact path a type check and its value check are one check: the first that fails names it.
    exact_checks = _merge(
        type_checks,
        [
            *_form_checks(
                r.get("seq", "long"),
                r.get("sensor", "string"),
                r.get("metric", "string"),
                r.get("unit", "string"),
            ),
            *_number_checks(r.get("value", "double"), exact_ts, v2, max_clock_skew_s),
        ],
    )
    reading_reason = F.when(fast, _first_failure(number_checks)).otherwise(_first_failure(exact_checks))
    reason = F.coalesce(F.col("record_reason"), reading_reason)
    judged = exploded.withColumn("reason", reason)
    good = F.col("reason").isNull()

    def when_good(typed_value: Column, exact_value: Column, name: str) -> Column:
        return F.when(good, F.when(fast, typed_value).otherwise(exact_value)).alias(name)

    def when_dead(name: str) -> Column:
        # A dead letter keeps its record's bytes; a good reading does not carry them along.
        return F.when(~good, F.col(name))

    verdicts = judged.select(
        "reason",
        "index",
        "topic",
        "partition",
        "offset",
        when_dead("key").alias("key"),
        when_dead("value").alias("record"),
        F.when(good, F.col("device")).alias("device"),
        when_good(f["seq"], r.get("seq", "long"), "seq"),
        when_good(f["sensor"], r.get("sensor", "string"), "sensor"),
        when_good(f["metric"], r.get("metric", "string"), "metric"),
        when_good(f["value"], r.get("value", "double"), "value"),
        when_good(f["unit"], r.get("unit", "string"), "unit"),
        F.when(good, ts).alias("ts"),
        F.when(good, F.timestamp_micros((ts * 1_000_000).cast("long"))).alias("event_time"),
    )
    return Parsed(verdicts)


def _signatures(
    records: DataFrame, keys: Keyring | Mapping[str, bytes] | None, partitions: int | None = None
) -> tuple[DataFrame, Column]:
    """The records with their `signer` and its `home` partition (null: not judged), and the
    reason their signature fails (null: it holds).

    HMAC-SHA256(key, SHA-256(value)) in Spark's own expressions: the keys' inner and outer
    pads are a small table held in the driver's plan (`local_table`: its broadcast needs no
    Python on the executors), broadcast to them and joined on the signer, with each device's
    home partition, which Kafka's partitioner gives in Python. The revoked devices' fences are
    a literal in the plan."""
    if keys is None:
        unsigned = records.withColumn("signer", F.lit(None).cast("string"))
        return unsigned.withColumn("home", F.lit(None).cast("int")), F.lit(None).cast("string")
    ring = keys if isinstance(keys, Keyring) else Keyring(keys)
    pads = [
        (device, _pad(key, 0x36), _pad(key, 0x5C), home_partition(device, partitions) if partitions else None)
        for device, key in sorted(ring.keys.items())
    ]
    # One task ships it, not one per row up to the cluster's cores.
    table = local_table(
        records.sparkSession, pads, "signer string, inner_pad binary, outer_pad binary, home int"
    ).coalesce(1)

    def header(name: str) -> Column:
        return F.get(F.filter("headers", lambda h: h["key"] == name), 0)["value"]

    signed = records.withColumn("signer", header(SIGNER_HEADER).cast("string")).withColumn(
        "mac", header(MAC_HEADER)
    )
    joined = signed.join(F.broadcast(table), "signer", "left")
    inner = F.unhex(F.sha2(F.concat("inner_pad", F.unhex(F.sha2("value", 256))), 256))
    expected = F.unhex(F.sha2(F.concat("outer_pad", inner), 256))
    signer = F.col("signer")
    reason = (
        F.when(signer.isNull() | F.col("mac").isNull(), F.lit(UNSIGNED))
        .when(_revoked(ring.revoked, signer), _naming(REVOKED, signer))
        .when(F.col("inner_pad").isNull(), _naming(UNKNOWN_SIGNER, signer))
        .when(expected != F.col("mac"), _naming(BAD_MAC, signer))
    )
    return joined, reason


def _revoked(revoked: Mapping[str, Fence], signer: Column) -> Column:
    """Whether the record lies at or past its signer's fence (Keyring.is_revoked)."""
    if not revoked:
        return F.lit(False)

    def fence(offsets: Fence) -> Column:
        parts = sorted(offsets)
        return F.map_from_arrays(
            F.array(*(F.lit(p) for p in parts)).cast("array<int>"),
            F.array(*(F.lit(offsets[p]) for p in parts)).cast("array<bigint>"),
        )

    fences = F.create_map(*(c for device in sorted(revoked) for c in (F.lit(device), fence(revoked[device]))))
    found = F.element_at(fences, signer)
    first = F.coalesce(F.element_at(found, F.col("partition")), F.lit(0))
    return F.coalesce(found.isNotNull() & (F.col("offset") >= first), F.lit(False))


def _pad(key: bytes, byte: int) -> bytes:
    """An HMAC-SHA256 pad: the key (hashed when longer than a block) zero-filled to 64 bytes, XOR byte."""
    block = (hashlib.sha256(key).digest() if len(key) > 64 else key).ljust(64, b"\0")
    return bytes(b ^ byte for b in block)


def _naming(reason: str, signer: Column) -> Column:
    """pikit_contract.signing.naming as a column."""
    return F.concat(F.lit(f"{reason} (signer: "), signer, F.lit(")"))


def in_agent_form(text: Column) -> Column:
    """Whether a record's text takes the typed path (see _AGENT_FORM)."""
    return (F.octet_length(text) <= _AGENT_FORM_MAX_BYTES) & text.rlike(_AGENT_FORM)


def _one_json_value(text: Column) -> Column:
    """The text as a VARIANT when it is one JSON value, else null. Spark's parser stops after
    the first value and ignores what follows (`{..} {..}`, `{..}x`), where Python's json says
    "Extra data"; parsed inside `[<text>,0]`, anything after the value either breaks the array
    or changes its length. (A text built to end in `,0]` itself still gets through.)"""
    wrapped = F.try_parse_json(F.concat(F.lit("["), text, F.lit(",0]")))
    whole = F.size(F.try_variant_get(wrapped, "$", "array<variant>")) == 2
    return F.when(whole, F.try_variant_get(wrapped, "$[0]", "variant"))


def _form_checks(seq: Column, sensor: Column, metric: Column, unit: Column) -> list[tuple[Column, str]]:
    """The contract's first checks on a reading, in its order: those that the agent form holds."""
    return [
        (seq >= 0, BAD_SEQ),
        (sensor.rlike(NAME_PATTERN), bad_name("sensor")),
        (metric.rlike(NAME_PATTERN), bad_name("metric")),
        (F.length(unit) <= UNIT_MAX_LEN, BAD_UNIT),
    ]


def _numbers_all_good(readings: Column, schema: Column) -> Column:
    """Whether every reading of a typed record passes `_number_checks` (false when unsure).

    The explode copies the columns beside each reading: a record's bytes, which only a dead
    letter needs, go along only with a record that may hold one, not with every reading."""
    values, stamps = readings["value"], readings["ts"]
    v2 = schema == 2
    newest = F.array_max(stamps)
    ok = (
        (F.array_min(values) >= -_DOUBLE_MAX)
        & (F.array_max(values) <= _DOUBLE_MAX)
        & (F.array_min(stamps) >= F.when(v2, TS_MS_MIN).otherwise(TS_MIN))
        & (newest <= F.when(v2, TS_MS_MAX).otherwise(TS_MAX))
        & at_most(F.when(v2, newest / 1000).otherwise(newest), F.col("latest_ts"))
    )
    return F.coalesce(ok, F.lit(False))


def _number_checks(value: Column, ts: Column, v2: Column, max_clock_skew_s: int) -> list[tuple[Column, str]]:
    """The contract's last checks on a reading, in its order: on its numbers (`ts` as written:
    seconds, or milliseconds where `v2`)."""
    return [
        (value.between(-_DOUBLE_MAX, _DOUBLE_MAX), BAD_VALUE),
        (v2 | ts.between(TS_MIN, TS_MAX), BAD_TS),
        (~v2 | ts.between(TS_MS_MIN, TS_MS_MAX), BAD_TS_MS),
        (at_most(F.when(v2, ts / 1000).otherwise(ts), F.col("latest_ts")), too_far_ahead(max_clock_skew_s)),
    ]


def _merge(
    type_checks: list[tuple[Column, str]], value_checks: list[tuple[Column, str]]
) -> list[tuple[Column, str]]:
    """Type checks first where they stand alone; a type check and the value check of the same
    reason become one (both must pass), in the value check's place."""
    by_reason = {reason: ok for ok, reason in type_checks}
    merged = [
        (by_reason.pop(reason) & ok if reason in by_reason else ok, reason) for ok, reason in value_checks
    ]
    return [(ok, reason) for ok, reason in type_checks if reason in by_reason] + merged


def dead_letter_records(dead: list[dict[str, Any]]) -> list[Record]:
    """Dead letters (Parsed.dead_letters' columns, on the driver) as Kafka records: the
    original bytes as the value; why, whence and (for one bad reading of a batch) which
    reading as headers."""
    records: list[Record] = []
    for letter in dead:
        headers = [
            ("reason", letter["reason"].encode()),
            ("source", f"{letter['topic']}/{letter['partition']}/{letter['offset']}".encode()),
        ]
        if letter["index"] is not None:
            headers.append(("reading", str(letter["index"]).encode()))
        key = None if letter["key"] is None else bytes(letter["key"])
        records.append((key, bytes(letter["value"]), headers))
    return records
