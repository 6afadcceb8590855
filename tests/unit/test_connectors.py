"""The connect role's kafka_connectors module: what it plans from the declared and the running
connectors, and how it reads Connect's answers. Against a real worker: tests/integration/test_connect.py."""

from __future__ import annotations

from types import ModuleType

import pytest
from ansible_collections.pikit.cluster.plugins.modules import kafka_connectors
from pikit_testkit.modules import from_file

from pikit import REPO


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


def test_a_restart_asked_for_is_planned_only_for_a_running_connector_the_run_leaves_as_it_is() -> None:
    """A renewed certificate reaches a connector's clients only when it starts again: the role asks
    for the mirror's restart; a connector this run creates or sets starts anew anyway, and one that
    is not there (or not listed) has nothing to restart."""
    m = load()
    desired = m.desired_configs([{"name": n, "config": SINK} for n in ("kept", "changed", "new")])
    current = {"kept": desired["kept"], "changed": {**desired["changed"], "file": "/tmp/old"}, "gone": {}}
    todo = m.plan(desired, current, remove_unlisted=False, restart=["kept", "changed", "new", "gone"])
    assert (todo.restart, todo.update, todo.create) == (["kept"], ["changed"], ["new"])
    only = {"kept": desired["kept"]}
    assert m.plan(only, only, False, ["kept"]).changes
    assert not m.plan(only, only, False, []).changes


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
        # A checkpoint connector with no consumer group to checkpoint makes no task: it runs.
        "idle": {"status": {"connector": {"state": "RUNNING"}, "tasks": []}, "info": {"tasks": []}},
        # A task made whose state is not reported yet does not run yet.
        "starting": {
            "status": {"connector": {"state": "RUNNING"}, "tasks": []},
            "info": {"tasks": [{"task": 0}]},
        },
    }
    seen = m.states(status)
    assert m.unsettled(["ok", "idle"], seen) == []
    waiting = m.unsettled(["bad", "starting", "new"], seen)
    assert waiting[0].startswith(
        "bad: connector RUNNING, tasks ['FAILED'] ['org.apache.kafka.connect.errors.ConnectException"
    )
    assert waiting[1:] == ["starting: connector RUNNING, tasks [] []", "new: not listed yet"]


def mirror_filters() -> ModuleType:
    return from_file("connect_filters", REPO / "roles/connect/filter_plugins/connect_filters.py")


SITE = {
    "alias": "greenhouse",
    "bootstrap": ["10.0.0.11:9092"],
    "keystore": "/k/site.pem",
    "truststore": "/k/ca.crt",
}
CORE = {
    "alias": "core",
    "bootstrap": ["core-1:9092", "core-2:9092"],
    "keystore": "/k/core.pem",
    "truststore": "/k/core.crt",
}


def test_a_mirror_is_a_source_and_a_checkpoint_connector_that_write_to_the_core_as_the_site() -> None:
    mirror, checkpoints = mirror_filters().connect_mirror_connectors(SITE, CORE, ["sensor-aggregates", "a.b"])
    assert (mirror["name"], checkpoints["name"]) == ("greenhouse.mirror", "greenhouse.checkpoints")
    config = mirror["config"]
    assert config["topics"] == r"sensor\-aggregates,a\.b", "names, not patterns"
    assert (config["exactly.once.support"], config["consumer.isolation.level"]) == (
        "required",
        "read_committed",
    )
    assert config["offsets.storage.topic"] == "greenhouse.mm2-offsets.internal", (
        "under the site's prefix on the core"
    )
    for client in ("producer", "consumer", "admin"):
        assert config[f"{client}.override.bootstrap.servers"] == "core-1:9092,core-2:9092"
        assert config[f"{client}.override.ssl.keystore.location"] == "/k/core.pem"
    assert config["source.cluster.ssl.keystore.location"] == "/k/site.pem"
    assert checkpoints["config"]["offsets.storage.topic"] == config["offsets.storage.topic"]


@pytest.mark.parametrize(
    ("alias", "refusal"),
    [("core", "differ from the core's"), ("green.house", "letters, digits"), ("", "letters")],
)
def test_a_site_alias_that_cannot_prefix_its_topics_on_the_core_is_refused(alias: str, refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        mirror_filters().connect_mirror_connectors({**SITE, "alias": alias}, CORE, ["t"])
