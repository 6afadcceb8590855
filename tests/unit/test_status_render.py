from pikit.status import Part, Status
from pikit.status_render import page, text


def _status(problem: bool) -> Status:
    broker = Part(
        "pi-2",
        {"up": False, "address": "10.0.0.12"},
        ["down: no answer on 10.0.0.12:9092 within 5 s"] if problem else [],
    )
    return Status(
        site="inventory/lab",
        checked_at=1795600800.0,
        quorum=Part(
            "KRaft",
            {
                "leader": 1,
                "leader_host": "pi-1",
                "voters": [{"id": 1, "lag": 0, "caught_up_s_ago": 0.1}],
                "observers": [],
            },
        ),
        brokers=[
            Part(
                "pi-1",
                {
                    "up": True,
                    "address": "10.0.0.11",
                    "node_id": 1,
                    "partitions": 14,
                    "leaders": 5,
                    "urp": 0,
                    "disk_used": 0.12,
                },
            ),
            broker,
        ],
        spark=[
            Part(
                "app sensor_aggregates",
                {
                    "state": "RUNNING",
                    "cores": 2,
                    "queries": [{"query": "stream", "batch": 12, "records_behind": 3, "progress_s_ago": 4.0}],
                },
            )
        ],
        agents=[
            Part(
                "edge-1",
                {"last_reading_s_ago": 1.2, "spool": 0, "version": "0.1.0", "certificate_days_left": 364.2},
            )
        ],
    )


def test_a_problem_is_named_with_its_reason_and_counted() -> None:
    status = _status(problem=True)
    assert status.problems == ["broker pi-2: down: no answer on 10.0.0.12:9092 within 5 s"]
    screen = text(status, color=False)
    assert "1 PROBLEMS" in screen
    assert "BAD pi-2" in screen and "down: no answer on 10.0.0.12:9092 within 5 s" in screen
    assert "ok  pi-1" in screen and "partitions 14 (leads 5)  URP 0  disk 12%" in screen
    assert "stream: batch 12, 3 records behind" in screen
    assert "spool 0  release 0.1.0  certificate 364 days" in screen
    as_dict = status.as_dict()
    assert as_dict["healthy"] is False and as_dict["brokers"][1]["healthy"] is False


def test_red_only_on_a_terminal_and_the_page_marks_bad_rows() -> None:
    status = _status(problem=True)
    assert "\033[31m" in text(status, color=True) and "\033[" not in text(status, color=False)
    html = page(status)
    assert '<tr class="bad"><td>broker</td><td>pi-2</td>' in html
    assert "pikit status: 1 problems" in html


def test_healthy_says_so() -> None:
    status = _status(problem=False)
    assert "HEALTHY" in text(status, color=False)
    assert status.as_dict()["healthy"] is True
    assert "pikit status: healthy" in page(status)


def test_each_node_shows_its_os_release_and_an_unknown_one_is_no_problem() -> None:
    status = _status(problem=False)
    status.nodes = [
        Part("pi-1", {"address": "10.0.0.11", "os": "Debian GNU/Linux 13 (trixie)"}),
        Part("pi-2", {"address": "10.0.0.12", "os": "Debian GNU/Linux 12 (bookworm)"}),
        Part("edge-1", {"address": "10.0.0.21", "os": "unknown: no node exporter answers on port 9100"}),
    ]
    screen = text(status, color=False)
    assert "Nodes (OS release)" in screen
    assert "ok  pi-1" in screen and "10.0.0.11  Debian GNU/Linux 13 (trixie)" in screen
    assert "10.0.0.12  Debian GNU/Linux 12 (bookworm)" in screen
    assert "HEALTHY" in screen and status.as_dict()["nodes"][2]["healthy"] is True


def test_a_mirror_shows_its_lag_per_topic_on_its_core() -> None:
    status = _status(False)
    status.connectors = [
        Part(
            "greenhouse.mirror",
            {
                "state": "RUNNING",
                "tasks": ["RUNNING"],
                "core": "core",
                "lag": {
                    "sensor-aggregates": {"records": 0, "seconds": 0.0, "lost": 0},
                    "sensor-alerts": {"records": 42, "seconds": 612.4, "lost": 0},
                },
            },
        )
    ]
    line = next(line for line in text(status, color=False).splitlines() if "greenhouse.mirror" in line)
    assert "sensor-aggregates on core: 0 behind, caught up" in line
    assert "sensor-alerts on core: 42 behind, oldest 612 s" in line


def test_a_hung_broker_that_keeps_the_admin_api_from_answering_renders_what_the_probe_found() -> None:
    """As on the demo's lab with pi-1's broker SIGSTOPped: the admin client's handshake with it gives
    up, so the others are known to answer and nothing more (pikit.status.kafka_parts)."""
    status = _status(problem=True)
    status.quorum.details = {}
    status.quorum.problems = ["the admin API did not answer (KafkaConnectionError: Handshake failed)"]
    status.brokers[0].details = {"up": True, "address": "10.0.0.11"}
    screen = text(status, color=False)
    assert "ok  pi-1" in screen and "10.0.0.11  answers on its client port" in screen
    assert "BAD pi-2" in screen and "BAD KRaft" in screen
    assert "the admin API did not answer" in page(status)
