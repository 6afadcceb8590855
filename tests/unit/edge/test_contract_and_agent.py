"""The reading contract, the sender's envelope, metrics, and the agent's sampling."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from edge_agent.agent import Agent
from edge_agent.config import parse
from edge_agent.kafka_link import pick_compression
from edge_agent.spool import Record
from pikit_contract import readings as contract
from pikit_contract.readings import (
    ContractError,
    Reading,
    decode_batch,
    encode_batch,
    envelope,
    envelopes,
    spool_body,
)


def reading(seq: int, **changes: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "sensor": "bme",
        "metric": "temperature",
        "value": 21.5,
        "unit": "C",
        "ts": 1.8e9,
        **changes,
    }


@pytest.mark.parametrize("schema", contract.SCHEMAS_READ)
def test_encode_and_decode_round_trip(schema: int) -> None:
    readings = [Reading("edge-1", i, "bme", "temperature", 20.0 + i, "C", 1.8e9 + i + 0.25) for i in range(3)]
    assert decode_batch(encode_batch("edge-1", readings, schema)) == readings


def test_version_2_writes_ts_as_integer_milliseconds() -> None:
    one = Reading("edge-1", 1, "bme", "temperature", 20.0, "C", 1795323249.9504)
    assert json.loads(encode_batch("edge-1", [one], 2))["readings"][0]["ts"] == 1795323249950
    assert json.loads(encode_batch("edge-1", [one], 1))["readings"][0]["ts"] == 1795323249.9504
    assert decode_batch(encode_batch("edge-1", [one], 2))[0].ts == 1795323249950 / 1000


def test_the_sender_envelope_is_a_contract_record() -> None:
    taken = [Reading("x", i, "bme", "t", 1.0, "C", 1.8e9 + i / 3) for i in range(5)]
    records = [Record(i, r.seq, spool_body(r)) for i, r in enumerate(taken)]
    values = envelopes("edge-7", records, size=2)
    assert [json.loads(v)["schema"] for v in values] == [contract.SCHEMA_VERSION] * 3
    decoded = [r for v in values for r in decode_batch(v)]
    assert [r.seq for r in decoded] == [0, 1, 2, 3, 4]
    assert {r.device for r in decoded} == {"edge-7"}
    assert [r.ts for r in decoded] == [round(r.ts * 1000) / 1000 for r in taken]
    # Byte for byte what encode_batch writes, though no JSON was parsed on the way.
    assert values == [encode_batch("edge-7", taken[i : i + 2]) for i in (0, 2, 4)]


def test_a_spool_is_the_same_under_either_release_and_each_sends_its_version() -> None:
    """This release spools what 0.1.0 spooled (version 1 bodies): 0.1.0, rolled back to, sends
    them as version 1 records, as it always did; this release as version 2. Both read alike."""
    taken = [Reading("edge-7", i, "bme", "t", 20.5, "C", 1795323249.95 + i) for i in range(3)]
    records = [Record(i, r.seq, spool_body(r)) for i, r in enumerate(taken)]
    assert [json.loads(r.payload)["ts"] for r in records] == [r.ts for r in taken], "as 0.1.0 spooled"
    as_0_1_0 = envelope("edge-7", 1, [r.payload for r in records])  # what 0.1.0's sender writes
    [as_0_2_0] = envelopes("edge-7", records, size=10)
    assert json.loads(as_0_2_0)["readings"][0]["ts"] == 1795323249950
    assert decode_batch(as_0_1_0) == taken
    in_ms = [(1795323249950 + 1000 * i) / 1000 for i in range(3)]
    assert decode_batch(as_0_2_0) == [Reading("edge-7", i, "bme", "t", 20.5, "C", in_ms[i]) for i in range(3)]


def test_compatible_additions_are_read_and_the_rest_passed_over() -> None:
    """A new optional field in a record or a reading, a new sensor or metric: same version, read."""
    added = {**reading(1, ts=1_800_000_000_000, sensor="sds011", metric="pm25"), "quality": 0.9}
    value = json.dumps({"schema": 2, "device": "d", "firmware": "2.1", "readings": [added]}).encode()
    [read] = decode_batch(value)
    assert (read.sensor, read.metric, read.ts) == ("sds011", "pm25", 1.8e9)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\xff\xfe", contract.NOT_JSON),
        (b"[1, 2]", contract.NOT_AN_OBJECT),
        (
            json.dumps({"schema": 3, "device": "d", "readings": [reading(1)]}).encode(),
            contract.UNKNOWN_SCHEMA,
        ),
        (json.dumps({"schema": 2, "device": "d", "readings": [reading(1)]}).encode(), contract.BAD_TS_MS),
        (
            json.dumps({"schema": 2, "device": "d", "readings": [reading(1, ts=1.8e12)]}).encode(),
            contract.BAD_TS_MS,  # milliseconds, but not an integer
        ),
        (json.dumps({"schema": 1, "device": "", "readings": [reading(1)]}).encode(), contract.BAD_DEVICE),
        (json.dumps({"schema": 1, "device": "d", "readings": []}).encode(), contract.NO_READINGS),
        (json.dumps({"schema": 1, "device": "d", "readings": [reading(-1)]}).encode(), contract.BAD_SEQ),
        (
            json.dumps({"schema": 1, "device": "d", "readings": [reading(1, value="hot")]}).encode(),
            contract.BAD_VALUE,
        ),
        (
            b'{"schema":1,"device":"d","readings":[{"seq":1,"sensor":"s","metric":"m","value":NaN,"unit":"C","ts":1.8e9}]}',
            contract.NOT_JSON,  # NaN is Python's, not JSON
        ),
        (json.dumps({"schema": 1, "device": "d", "readings": [reading(1, ts=12)]}).encode(), contract.BAD_TS),
        (
            json.dumps({"schema": 1, "device": "d", "readings": [{"seq": 1}]}).encode(),
            contract.lacks("sensor"),
        ),
    ],
)
def test_malformed_records_say_why(value: bytes, reason: str) -> None:
    with pytest.raises(ContractError) as caught:
        decode_batch(value)
    assert caught.value.reason == reason


def test_auto_compression_prefers_zstd_when_installed() -> None:
    assert pick_compression("auto") in ("zstd", "lz4", "gzip")
    assert pick_compression("none") is None


def _doc(tmp_path: Path, **spool: Any) -> dict[str, Any]:
    return {
        "device_id": "edge-t",
        "kafka": {"bootstrap_servers": ["127.0.0.1:1"]},
        "spool": {"directory": str(tmp_path / "spool"), **spool},
        "metrics": {"listen": ""},
        "sensors": [{"type": "simulated", "seed": 1, "metrics": ["temperature", "humidity"]}],
    }


def _agent(tmp_path: Path, **spool: Any) -> Agent:
    return Agent(parse(_doc(tmp_path, **spool)))


class Broken:
    name = "broken"

    def read(self) -> list[tuple[str, float, str]]:
        raise OSError("I2C bus timeout")


def test_sampling_spools_readings_with_consecutive_sequence_numbers(tmp_path: Path) -> None:
    agent = _agent(tmp_path, fsync="always")
    for _ in range(3):
        agent.sample(agent.sensors[0].sensor)
    seqs = [r.seq for r in agent.spool.read(100)]
    assert seqs == [0, 1, 2, 3, 4, 5]
    assert agent.metrics.taken == agent.metrics.spooled == 6
    agent.spool.close()
    again = _agent(tmp_path)
    assert again.next_seq == 6, "sequence numbers continue after a restart"


def test_a_failing_sensor_is_counted_not_fatal(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    agent.sample(Broken())
    agent.sample(Broken())
    assert agent.metrics.sensor_errors["broken"] == 2
    assert 'edge_agent_sensor_errors_total{sensor="broken"} 2' in agent.metrics.render()


def test_a_full_spool_with_stop_sampling_counts_and_keeps_sequence_gapless(tmp_path: Path) -> None:
    agent = _agent(tmp_path, max_bytes=65536, full_policy="stop_sampling", fsync="never")
    for _ in range(2000):
        agent.sample(agent.sensors[0].sensor)
    seqs = [r.seq for r in agent.spool.read(10**6)]
    assert seqs == list(range(len(seqs)))
    assert agent.spool.refused == 4000 - len(seqs) > 0
    assert (
        f'edge_agent_readings_dropped_total{{reason="refused"}} {agent.spool.refused}'
        in agent.metrics.render()
    )
    assert 'edge_agent_readings_dropped_total{reason="disk_full"} 0' in agent.metrics.render()


def test_sampling_waits_for_a_synchronised_clock_and_stops_waiting_on_shutdown(tmp_path: Path) -> None:
    agent = _agent(tmp_path, fsync="always")
    answers = iter([False, False, True])
    checks: list[bool] = []

    def synchronised() -> bool:
        checks.append(True)
        return next(answers)

    agent.stop.wait = lambda timeout=None: False  # type: ignore[method-assign]
    agent.wait_for_clock(synchronised)
    assert len(checks) == 3 and agent.metrics.clock_unsynchronised == 0
    agent.stop.set()
    agent.wait_for_clock(lambda: False)  # shutting down: no endless wait
    assert "edge_agent_clock_unsynchronised 1" in agent.metrics.render()


def test_the_clock_gate_can_be_turned_off_and_reads_the_kernel(tmp_path: Path) -> None:
    from edge_agent import clock

    assert isinstance(clock.synchronised(), bool)
    agent = Agent(parse({**_doc(tmp_path), "require_clock_sync": False}))
    agent.wait_for_clock(lambda: pytest.fail("not asked when turned off"))


def test_reconnect_backoff_stays_within_a_few_seconds() -> None:
    from edge_agent.sender import MAX_BACKOFF_S, backoff

    delays = [backoff(n) for n in range(1, 40)]
    assert delays[0] <= 0.5 * 1.25
    assert max(delays) <= MAX_BACKOFF_S * 1.25 <= 5.0
    assert min(delays[5:]) >= MAX_BACKOFF_S * 0.75, "a dead broker is not hammered"


class Hung:
    """A sensor whose read blocks until released (a stuck I2C bus)."""

    name = "hung"

    def __init__(self) -> None:
        self.release = threading.Event()

    def read(self) -> list[tuple[str, float, str]]:
        self.release.wait(30)
        return [("temperature", 20.0, "C")]


class Idle:
    """A sender that sends nothing: the test watches sampling alone."""

    def __init__(self, *_: object) -> None:
        pass

    def run(self, stop: threading.Event, _deadline: list[float]) -> None:
        stop.wait()


def test_a_hung_sensor_delays_no_other_and_shows_as_stalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("edge_agent.agent.Sender", Idle)
    doc = _doc(tmp_path, fsync="never")
    doc["require_clock_sync"] = False
    doc["sensors"] = [
        {"type": "simulated", "name": "fast", "interval": 0.05},
        {"type": "simulated", "name": "hung", "interval": 0.05, "timeout": 0.2},
    ]
    agent = Agent(parse(doc))
    hung = Hung()
    agent.sensors[1].sensor = hung
    runner = threading.Thread(target=agent.run)
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not agent.sensors[1].stalled:
            time.sleep(0.05)
        taken_while_hung = agent.metrics.spooled
        assert agent.sensors[1].stalled, "the overdue read shows as stalled"
        assert 'edge_agent_sensor_stalled{sensor="hung"} 1' in agent.metrics.render()
        # fast: 2 metrics every 50 ms while the other read hangs
        assert taken_while_hung >= 10
        assert {json.loads(r.payload)["sensor"] for r in agent.spool.read(10**6)} == {"fast"}
        hung.release.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and agent.sensors[1].stalled:
            time.sleep(0.05)
        assert not agent.sensors[1].stalled
        assert agent.metrics.sensor_errors["hung"] == 1, "the late read failed: its values were not taken"
    finally:
        hung.release.set()
        agent.stop.set()
        runner.join(30)
    assert not runner.is_alive()


def test_a_read_over_its_timeout_is_a_failed_read(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    slow = Hung()
    slow.release.set()
    agent.sample(slow, timeout=0.0)
    assert agent.metrics.sensor_errors["hung"] == 1
    assert agent.metrics.spooled == 0
    agent.sample(slow, timeout=5.0)
    assert agent.metrics.spooled == 1


class RecordingProducer:
    """Stands in for KafkaProducer: keeps what was sent, and the options it was made with."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.sent: list[dict[str, Any]] = []

    def send(self, topic: str, **record: Any) -> None:
        self.sent.append({"topic": topic, **record})


def every_broker_answers(options: dict[str, Any], timeout: float) -> list[str]:
    return list(options["bootstrap_servers"])


def test_every_record_names_the_release_that_sent_it(tmp_path: Path) -> None:
    """A roll-out waits for its canaries' records to carry the new release (playbooks/edge-upgrade.yml)."""
    from importlib.metadata import version

    from edge_agent.kafka_link import KafkaLink

    link = KafkaLink(parse(_doc(tmp_path)), producer_factory=RecordingProducer, probe=every_broker_answers)
    link.submit([Record(i, i, json.dumps(reading(i)).encode()) for i in range(3)])
    producer = link.producer
    assert producer.sent, "nothing was sent"
    for record in producer.sent:
        assert (contract.RELEASE_HEADER, version("pikit-edge-agent").encode()) in record["headers"]


def test_every_record_carries_the_spool_depth_it_left(tmp_path: Path) -> None:
    """`pikit status` shows a device's backlog from its records, without reaching the device."""
    from edge_agent.kafka_link import KafkaLink

    depth = iter([41, 7])
    link = KafkaLink(
        parse(_doc(tmp_path)),
        producer_factory=RecordingProducer,
        backlog=lambda: next(depth),
        probe=every_broker_answers,
    )
    link.submit([Record(1, 1, json.dumps(reading(1)).encode())])
    link.submit([Record(2, 2, json.dumps(reading(2)).encode())])
    sent = [dict(record["headers"])[contract.SPOOL_HEADER] for record in link.producer.sent]
    assert sent == [b"41", b"7"]


def test_a_new_producer_bootstraps_only_from_brokers_that_answer(tmp_path: Path) -> None:
    """A hung broker (frozen: its kernel accepts, it never answers) is left out of a new
    producer's bootstrap; none answering fails the round before any producer is made, so the
    sender backs off and tries again, its readings kept in the spool."""
    from edge_agent.kafka_link import KafkaLink
    from kafka.errors import KafkaTimeoutError

    doc = _doc(tmp_path)
    doc["kafka"]["bootstrap_servers"] = ["10.0.0.1:9092", "10.0.0.2:9092", "10.0.0.3:9092"]
    asked: list[float] = []

    def only_the_second(options: dict[str, Any], timeout: float) -> list[str]:
        asked.append(timeout)
        return [options["bootstrap_servers"][1]]

    link = KafkaLink(parse(doc), producer_factory=RecordingProducer, probe=only_the_second)
    link.submit([Record(1, 1, json.dumps(reading(1)).encode())])
    assert link.producer.options["bootstrap_servers"] == ["10.0.0.2:9092"]
    assert asked == [5.0]
    silent = KafkaLink(parse(doc), producer_factory=RecordingProducer, probe=lambda options, timeout: [])
    with pytest.raises(KafkaTimeoutError, match="no broker of"):
        silent.submit([Record(1, 1, json.dumps(reading(1)).encode())])
    assert silent.producer is None


def test_the_metrics_name_the_running_release(tmp_path: Path) -> None:
    from importlib.metadata import version

    text = _agent(tmp_path).metrics.render()
    assert f'edge_agent_build_info{{version="{version("pikit-edge-agent")}"}} 1' in text
    started = float(
        next(line.split()[1] for line in text.splitlines() if line.startswith("edge_agent_start_time"))
    )
    assert abs(started - time.time()) < 60


def test_a_round_never_acknowledged_is_given_up_for_a_new_producer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer whose retries never land (stale leaders it never mends) holds no round for
    good: past ACK_STUCK_SECONDS the wait raises, and the sender drops it and sends again."""
    from kafka.errors import KafkaTimeoutError

    from edge_agent import kafka_link

    class Pending:
        is_done = False

        def get(self, timeout: float) -> None:
            time.sleep(min(timeout, 0.05))
            raise KafkaTimeoutError("still in flight")

    monkeypatch.setattr(kafka_link, "ACK_STUCK_SECONDS", 0.3)
    link = kafka_link.KafkaLink(
        parse(_doc(tmp_path)), producer_factory=RecordingProducer, probe=every_broker_answers
    )
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="not acknowledged in 0s: a new producer sends it again"):
        link.acknowledged([Pending()], give_up=lambda: False)
    assert 0.3 <= time.monotonic() - started < 2
    assert link.acknowledged([Pending()], give_up=lambda: True) is False, "stopping still wins"


def test_a_spooled_body_in_another_key_order_is_converted_the_slow_way() -> None:
    fast = contract.in_milliseconds(b'{"seq":1,"value":2.5,"ts":1795323249.95}')
    slow = contract.in_milliseconds(b'{"ts": 1795323249.95, "seq": 1, "value": 2.5}')
    assert fast == b'{"seq":1,"value":2.5,"ts":1795323249950}'
    assert json.loads(slow) == json.loads(fast)
