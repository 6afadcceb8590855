"""The connect role's kafka_connectors module: what it plans from the declared and the running
connectors, and how it reads Connect's answers. Against a real worker: tests/integration/test_connect.py."""

from __future__ import annotations

from types import ModuleType

import pytest

from pikit.connect import kafka_connectors


def load() -> ModuleType:
    return kafka_connectors


SINK = {"connector.class": "FileStreamSink", "topics": "aggregates", "file": "/tmp/out", "tasks.max": 1}


def test_configs_become_strings_named_for_their_connector_as_connect_keeps_them() -> None:
    desired = load().desired_configs(
        [{"name": "out", "config": {**SINK, "errors.tolerance": "none", "x": True}}]
    )
    assert desired == {
        "out": {
            "connector.class": "FileStreamSink",
            "topics": "aggregates",
            "file": "/tmp/out",
            "tasks.max": "1",
            "errors.tolerance": "none",
            "x": "true",
            "name": "out",
        }
    }


@pytest.mark.parametrize(
    ("entries", "refusal"),
    [
        ([{"config": SINK}], "without a name"),
        ([{"name": "a", "config": SINK}, {"name": "a", "config": SINK}], "listed twice"),
        ([{"name": "a", "config": {"topics": "t"}}], "no connector.class"),
        ([{"name": "a", "config": {**SINK, "name": "b"}}], "names another connector, b"),
    ],
)
def test_an_ambiguous_declaration_is_refused_naming_the_connector(
    entries: list[dict[str, object]], refusal: str
) -> None:
    with pytest.raises(ValueError, match=refusal):
        load().desired_configs(entries)


def test_the_plan_creates_the_missing_sets_the_changed_and_deletes_the_unlisted_only_when_asked() -> None:
    m = load()
    desired = m.desired_configs(
        [{"name": "a", "config": SINK}, {"name": "b", "config": {**SINK, "file": "/tmp/b"}}]
    )
    current = {"b": {**desired["b"], "file": "/tmp/old"}, "c": {"name": "c"}}
    todo = m.plan(desired, current, remove_unlisted=True)
    assert (todo.create, todo.update, todo.delete) == (["a"], ["b"], ["c"])
    assert m.plan(desired, current, remove_unlisted=False).delete == []
    assert not m.plan(desired, dict(desired), remove_unlisted=True).changes


def test_connects_validation_messages_name_the_connector_and_the_key() -> None:
    validation = {
        "error_count": 1,
        "configs": [
            {"value": {"name": "file", "errors": []}},
            {"value": {"name": "topics", "errors": ["Must configure one of topics or topics.regex"]}},
        ],
    }
    assert load().refusals("out", validation) == ["out: topics: Must configure one of topics or topics.regex"]
    assert load().refusals("out", {"error_count": 0, "configs": []}) == []


def test_a_connector_runs_when_it_and_every_task_run_and_a_failed_task_shows_its_trace() -> None:
    m = load()
    status = {
        "ok": {"status": {"connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "RUNNING"}]}},
        "bad": {
            "status": {
                "connector": {"state": "RUNNING"},
                "tasks": [
                    {
                        "id": 0,
                        "state": "FAILED",
                        "trace": "org.apache.kafka.connect.errors.ConnectException: no file\\n\\tat",
                    }
                ],
            }
        },
        "idle": {"status": {"connector": {"state": "RUNNING"}, "tasks": []}},
    }
    seen = m.states(status)
    assert m.unsettled(["ok"], seen) == []
    waiting = m.unsettled(["bad", "idle", "new"], seen)
    assert waiting[0].startswith(
        "bad: connector RUNNING, tasks ['FAILED'] ['org.apache.kafka.connect.errors.ConnectException"
    )
    assert waiting[1:] == ["idle: connector RUNNING, tasks [] []", "new: not listed yet"]
