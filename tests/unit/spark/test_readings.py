"""The Spark parser accepts and rejects exactly what the agent's contract module does."""

from __future__ import annotations

import json
import time
from typing import Any

from pikit_contract import signing
from pikit_contract.readings import BAD_VALUE, NOT_JSON, ContractError, decode_envelope, validate_reading
from pikit_spark.readings import dead_letter_records, in_agent_form, parse, too_far_ahead
from pikit_testkit.pipeline_model import authentic
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tests.unit.spark.records import (
    MALFORMED_READINGS,
    MALFORMED_RECORDS,
    MALFORMED_V2_READINGS,
    T0,
    batch,
    in_ms,
    reading,
)


def _frame(spark: SparkSession, values: list[bytes]) -> Any:
    rows = [(b"k", v, "sensor-readings", 0, i) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")


Verdict = tuple[int, int | None, str]  # offset, reading index (None: the whole record), reason


def _python_verdicts(values: list[bytes]) -> tuple[set[tuple[str, int]], list[Verdict]]:
    """The (device, seq) the contract accepts, and each rejection with its reason."""
    good: set[tuple[str, int]] = set()
    rejected: list[Verdict] = []
    for offset, value in enumerate(values):
        try:
            device, raws, schema = decode_envelope(value)
        except ContractError as exc:
            rejected.append((offset, None, exc.reason))
            continue
        for index, raw in enumerate(raws):
            try:
                good.add((device, validate_reading(device, raw, schema).seq))
            except ContractError as exc:
                rejected.append((offset, index, exc.reason))
    return good, sorted(rejected, key=str)


def test_both_paths_agree_with_the_contract_reason_for_reason(spark: SparkSession) -> None:
    """Each malformed reading beside a good one in a record of its own: the records whose text is
    plain take the typed path, the others the exact one; texts around the JSON value too."""
    values = [
        *(batch("edge-4", [reading(100 + i, T0), bad]) for i, bad in enumerate(MALFORMED_READINGS)),
        batch("edge-5", [reading(1, T0)]) + b" {}",  # two JSON values
        batch("edge-5", [reading(2, T0)]) + b"x",
        batch("edge-5", [reading(8, T0)]) + b"\x0c",  # a form feed is not JSON whitespace
        b" " + batch("edge-5", [reading(3, T0)]) + b"\n",  # whitespace around: fine
        batch("edge-5", [{**reading(4, T0), "unit": "\u00b0C", "sensor": "5"}]),
        batch("edge-5", [{**reading(5, T0), "value": 10**30, "ts": int(T0)}]),  # integers as numbers
        batch("edge-5", [{**reading(6, T0), "value": 1e308 * 10}]),  # inf: dumps writes Infinity
        batch("edge-5", [reading(7, T0)]).replace(b'"sim"', b"'sim'"),  # single quotes are not JSON
        # Version 2: every malformed reading again, its ts in milliseconds; then version 2's own.
        *(
            batch("edge-8", [in_ms(reading(200 + i, T0)), in_ms(bad)], 2)
            for i, bad in enumerate(MALFORMED_READINGS)
        ),
        *(
            batch("edge-8", [in_ms(reading(300 + i, T0)), bad], 2)
            for i, bad in enumerate(MALFORMED_V2_READINGS)
        ),
    ]
    expected_good, expected_rejected = _python_verdicts(values)
    parsed = parse(_frame(spark, values))
    good = {(r["device"], r["seq"]) for r in parsed.readings.collect()}
    assert good == expected_good
    assert {("edge-5", 3), ("edge-5", 4), ("edge-5", 5)} <= good
    dead = sorted(((d["offset"], d["index"], d["reason"]) for d in parsed.dead_letters.collect()), key=str)
    assert dead == expected_rejected, [
        (a, b) for a, b in zip(dead, expected_rejected, strict=False) if a != b
    ]


def test_only_records_in_the_agents_form_take_the_typed_path_and_both_paths_agree(
    spark: SparkSession,
) -> None:
    """The typed path trusts the agent form for seq, names and unit: a record in it must decode
    alike in both parsers; anything else, however close, must take the exact path."""
    good = reading(1, T0)
    in_form = [
        batch("edge-6", [good, {**reading(2, T0), "unit": "\u00b0C", "value": -7}]),  # an escape, an integer
        batch("e" * 64, [{**reading(0, T0), "sensor": "s" * 64, "unit": "u" * 16, "value": 2.5e-3}]),
        batch("edge-6", [{**reading(3, T0), "unit": 'say "hi"\n'}]),
        batch("edge-6", [{**reading(4, T0), "ts": 12}, {**reading(5, T0), "value": 1.5}]),
        batch("edge-6", [reading(6, T0)]).replace(b'"value":20.0', b'"value":1e400'),  # inf
        batch("edge-6", [in_ms(reading(7, T0)), in_ms(reading(8, T0 + 0.001))], 2),
        batch("edge-6", [{**reading(9, T0), "ts": 12}], 2),  # an integer: in form, refused by its number
        batch("edge-6", [in_ms(reading(10, T0))], 1),  # version 1 with milliseconds: a number, refused by it
    ]
    out_of_form = [
        json.dumps({"schema": 1, "device": "edge-7", "readings": [good]}).encode(),  # whitespace
        batch("edge-7", [{**reading(1, T0), "unit": "u" * 17}]),
        batch("edge-7", [{**reading(2, T0), "sensor": "has space"}]),
        batch("edge-7", [{**reading(3, T0), "seq": -1}]),
        batch("edge-7", [{**reading(4, T0), "seq": 2**63}]),
        batch("edge-7", [{**reading(5, T0), "unit": "\U0001f600"}]),  # a surrogate pair when escaped
        batch("edge-7", [{**reading(6, T0), "extra": 1}]),
        batch("edge-7", [reading(7, T0)]).replace(b'"unit":"C"', b'"unit":"C","unit":"F"'),  # a duplicate key
        batch("edge-7", [reading(8, T0)]).replace(b'"unit":"C"', b'"unit":5'),
        batch("edge-7", [reading(9, T0)]) + b"\n",
        batch("edge-7", [reading(10, T0)]) + batch("edge-7", [reading(11, T0)]),
        batch("edge-7", [reading(12, T0)]).replace(b'"C"', b'"\xc3"'),  # invalid UTF-8
        batch("edge-7", [reading(13, T0)]).replace(b'"C"', b'"\x01"'),  # a raw control character
        batch("edge-7", [reading(n, T0) for n in range(20, 3000)]),  # longer than the form is matched
        batch("edge-7", [reading(14, T0)], 2),  # version 2 with seconds: not its form
    ]
    values = in_form + out_of_form
    frame = _frame(spark, values)
    paths = [row[0] for row in frame.select(in_agent_form(F.col("value").cast("string"))).collect()]
    assert paths == [True] * len(in_form) + [False] * len(out_of_form)
    expected_good, expected_rejected = _python_verdicts(values)
    parsed = parse(frame)
    assert {(r["device"], r["seq"]) for r in parsed.readings.collect()} == expected_good
    dead = sorted(((d["offset"], d["index"], d["reason"]) for d in parsed.dead_letters.collect()), key=str)
    assert dead == expected_rejected


def test_parser_agrees_with_the_contract_reason_for_reason(spark: SparkSession) -> None:
    mixed = [reading(10, T0), *MALFORMED_READINGS, reading(11, T0 + 1, value=-3.5)]
    values = [
        batch("edge-1", [reading(1, T0), reading(2, T0 + 1)]),
        *MALFORMED_RECORDS,
        batch("edge-2", mixed),
        batch("edge-3", [{**reading(4, T0), "extra": {"nested": [1, 2]}}]),  # more fields are fine
    ]
    expected_good, expected_rejected = _python_verdicts(values)
    assert len(expected_rejected) == len(MALFORMED_RECORDS) + len(MALFORMED_READINGS)

    parsed = parse(_frame(spark, values))
    good = {(r["device"], r["seq"]) for r in parsed.readings.collect()}
    assert (
        good == expected_good == {("edge-1", 1), ("edge-1", 2), ("edge-2", 10), ("edge-2", 11), ("edge-3", 4)}
    )
    dead = sorted(((d["offset"], d["index"], d["reason"]) for d in parsed.dead_letters.collect()), key=str)
    assert dead == expected_rejected, [
        (a, b) for a, b in zip(dead, expected_rejected, strict=False) if a != b
    ]


def test_dead_letters_keep_the_original_bytes_and_say_why(spark: SparkSession) -> None:
    bad_reading = {**reading(3, T0), "value": "hot"}
    values = [b"not json at all", batch("edge-1", [reading(2, T0), bad_reading])]
    dead = [r.asDict() for r in parse(_frame(spark, values)).dead_letters.collect()]
    by_value = {value: {k: v.decode() for k, v in headers} for _, value, headers in dead_letter_records(dead)}
    assert by_value[b"not json at all"]["source"] == "sensor-readings/0/0"
    assert by_value[b"not json at all"]["reason"] == NOT_JSON
    assert "reading" not in by_value[b"not json at all"]
    assert by_value[values[1]] == {
        "reason": BAD_VALUE,
        "source": "sensor-readings/0/1",
        "reading": "1",
    }


def test_valid_readings_keep_their_values_and_event_time(spark: SparkSession) -> None:
    values = [batch("edge-1", [reading(7, T0 + 0.25, value=21.5, metric="humidity")])]
    (row,) = parse(_frame(spark, values)).readings.collect()
    assert (row["device"], row["seq"], row["metric"], row["value"], row["unit"]) == (
        "edge-1",
        7,
        "humidity",
        21.5,
        "C",
    )
    assert row["event_time"].timestamp() == T0 + 0.25


def test_a_reading_from_the_future_is_a_dead_letter_and_never_a_reading(spark: SparkSession) -> None:
    now = time.time()
    future = {**reading(2, now + 3600), "value": 99.0}
    values = [batch("edge-1", [reading(1, now + 60), future]), batch("edge-2", [reading(5, 4_000_000_000)])]
    parsed = parse(_frame(spark, values), max_clock_skew_s=300)
    assert [(r["device"], r["seq"]) for r in parsed.readings.collect()] == [("edge-1", 1)]
    reasons = sorted(d["reason"] for d in parsed.dead_letters.collect())
    assert reasons == [too_far_ahead(300)] * 2


def test_signatures_agree_with_the_agents_signing_module_reason_for_reason(spark: SparkSession) -> None:
    """A record counts only when signed by a known device that is the device it claims; every
    other record is one dead letter whose reason names the signer, as pikit_contract.signing says."""
    secret = b"site secret"
    keys = {d: signing.device_key(secret, d) for d in ("edge-1", "edge-2")}
    own = batch("edge-1", [reading(1, T0), reading(2, T0)])
    as_other = batch("edge-2", [reading(3, T0)])
    unknown_key = signing.device_key(secret, "edge-9")
    bad_reading = batch("edge-1", [reading(4, T0), {**reading(5, T0), "value": "x"}])
    records: list[tuple[bytes, list[tuple[str, bytes]]]] = [
        (own, signing.headers("edge-1", keys["edge-1"], own)),  # good: 2 readings
        (as_other, signing.headers("edge-1", keys["edge-1"], as_other)),  # forged by edge-1
        (own, []),  # unsigned
        (own, [(signing.SIGNER_HEADER, b"edge-1")]),  # a signer but no MAC
        (own, signing.headers("edge-9", unknown_key, own)),  # a key this cluster never issued
        (own + b" ", signing.headers("edge-1", keys["edge-1"], own)),  # the bytes changed after signing
        (as_other, signing.headers("edge-2", keys["edge-1"], as_other)),  # edge-1's key, edge-2's name
        (b"not json", signing.headers("edge-2", keys["edge-2"], b"not json")),  # signed garbage
        (bad_reading, signing.headers("edge-1", keys["edge-1"], bad_reading)),  # signed, one bad reading
    ]
    rows = [(b"k", v, h, "sensor-readings", 0, i) for i, (v, h) in enumerate(records)]
    frame = spark.createDataFrame(
        rows,
        "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
        "partition int, offset long",
    )
    expected_dead: list[Verdict] = []
    expected_good: set[tuple[str, int]] = set()
    for offset, (value, headers) in enumerate(records):
        reason, signer = signing.verdict(value, headers, keys)
        if reason is not None:
            expected_dead.append((offset, None, reason))
            continue
        good, rejected = _python_verdicts([value])
        device = next(iter({d for d, _ in good}), None)
        forged = signing.forged_reason(signer, device) if device else None
        if forged:
            expected_dead.append((offset, None, forged))
            continue
        expected_good |= good
        expected_dead += [(offset, index, why) for _, index, why in rejected]
    parsed = parse(frame, keys=keys)
    assert (
        {(r["device"], r["seq"]) for r in parsed.readings.collect()}
        == expected_good
        == {
            ("edge-1", 1),
            ("edge-1", 2),
            ("edge-1", 4),
        }
    )
    dead = sorted(((d["offset"], d["index"], d["reason"]) for d in parsed.dead_letters.collect()), key=str)
    assert dead == sorted(expected_dead, key=str)
    assert (1, None, f"{signing.FORGED} (signer: edge-1)") in dead
    assert (2, None, signing.UNSIGNED) in dead
    assert (6, None, f"{signing.BAD_MAC} (signer: edge-2)") in dead
    assert (7, None, NOT_JSON) in dead
    # Without keys nothing is checked: every record is read for what it says.
    unchecked = parse(frame.drop("headers"))
    assert ("edge-2", 3) in {(r["device"], r["seq"]) for r in unchecked.readings.collect()}


def test_a_record_outside_its_devices_partition_is_a_dead_letter_saying_misplaced(
    spark: SparkSession,
) -> None:
    """Each device's validly signed records in every partition of six: read in the partition the
    agent's producer keys them to (signing.home_partition), a dead letter `misplaced` in every
    other, as pikit_testkit's model says; a forged record is named forged wherever it lies, and
    without the count of partitions nothing is judged by its place."""
    secret = b"site secret"
    keys = {d: signing.device_key(secret, d) for d in ("edge-1", "edge-2")}
    partitions = 6
    rows = []
    for partition in range(partitions):
        for offset, device in enumerate(("edge-1", "edge-2")):
            value = batch(device, [reading(partition, T0)])
            rows.append((b"k", value, signing.headers(device, keys[device], value), "t", partition, offset))
        forged = batch("edge-2", [reading(100 + partition, T0)])
        rows.append((b"k", forged, signing.headers("edge-1", keys["edge-1"], forged), "t", partition, 2))
    frame = spark.createDataFrame(
        rows,
        "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
        "partition int, offset long",
    )
    judged = parse(frame, keys=keys, partitions=partitions).verdicts.collect()
    found = {(r["partition"], r["offset"]): r["reason"] for r in judged}
    homes = {d: signing.home_partition(d, partitions) for d in keys}
    assert homes["edge-1"] != homes["edge-2"], "the test needs the two devices in two partitions"
    for partition in range(partitions):
        for offset, device in enumerate(("edge-1", "edge-2")):
            want = None if partition == homes[device] else f"{signing.MISPLACED} (signer: {device})"
            assert found[(partition, offset)] == want
        assert found[(partition, 2)] == f"{signing.FORGED} (signer: edge-1)"
    kept, refused = authentic([(v, h, p) for _, v, h, _, p, _ in rows], keys, partitions)
    read = {(p, o) for _, v, _, _, p, o in rows if v in kept}
    assert read == {(p, o) for (p, o), why in found.items() if why is None}
    assert len(refused) == len(rows) - len(read)
    # Without the count, as before: only the signature and the claim are judged.
    unplaced = {
        (r["partition"], r["offset"]): r["reason"] for r in parse(frame, keys=keys).verdicts.collect()
    }
    assert sorted(o for (_, o), why in unplaced.items() if why is None) == sorted([0, 1] * partitions)


def test_a_revoked_devices_records_from_its_fence_on_are_dead_letters_saying_revoked(
    spark: SparkSession,
) -> None:
    """Below its fence a revoked device's record is read as before (written while trusted); at
    and past it, and anywhere in a partition the fence does not name, it is a dead letter
    `revoked`, as pikit_contract.signing.verdict says for the same position. Others are untouched."""
    secret = b"site secret"
    keys = {d: signing.device_key(secret, d) for d in ("edge-1", "edge-2")}
    ring = signing.Keyring(keys, {"edge-1": {0: 2, 1: 1}})
    positions = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 0)]
    rows = []
    expected: dict[tuple[int, int], str | None] = {}
    for seq, (partition, offset) in enumerate(positions):
        for device in ("edge-1", "edge-2"):
            value = batch(device, [reading(seq, T0)])
            at = offset * 2 + (device == "edge-2")  # both devices in each partition, apart
            rows.append((b"k", value, signing.headers(device, keys[device], value), "t", partition, at))
            expected[(partition, at)] = signing.verdict(value, rows[-1][2], ring, (partition, at))[0]
    frame = spark.createDataFrame(
        rows,
        "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
        "partition int, offset long",
    )
    parsed = parse(frame, keys=ring)
    found: dict[tuple[int, int], str | None] = {
        (r["partition"], r["offset"]): r["reason"] for r in parsed.verdicts.collect()
    }
    assert found == expected
    revoked = f"{signing.REVOKED} (signer: edge-1)"
    # edge-1 writes the even offsets: from 2 on in partition 0, from 1 on in 1, all of 2.
    revoked_at = [at for at, why in sorted(found.items()) if why == revoked]
    assert revoked_at == [(0, 2), (0, 4), (0, 6), (1, 2), (2, 0)]
    assert all(why is None for (_, at), why in found.items() if at % 2 == 1)  # edge-2, never revoked
