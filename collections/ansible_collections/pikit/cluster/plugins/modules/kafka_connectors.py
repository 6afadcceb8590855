#!/usr/bin/python
"""Kafka Connect's connectors, declared: reconciled through the workers' REST API the way the kafka
role reconciles topics; and the health gate of the workers' rolling restart.

Runs on the controller (the firewall opens the REST port to the workers and the admin ranges
only). Standard library only: no client to install.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

DOCUMENTATION = r"""
module: kafka_connectors
short_description: Reconcile Kafka Connect connectors; wait for a worker to serve
description:
  - C(action=reconcile) validates every connector to create or change with Connect's own
    C(PUT /connector-plugins/<class>/config/validate) first, and fails with Connect's messages before
    anything changes when one is refused. Then it creates the missing connectors, sets the config
    of those whose config differs, and deletes the unlisted ones when I(remove_unlisted). It waits
    up to I(wait_timeout) seconds until every listed connector and its tasks run, those it created
    or changed for I(settle_seconds) in a row; a task starts RUNNING and fails at its first poll
    (a topic its principal may not read), so one look would pass it.
  - I(restart) names connectors to restart with their tasks when they already run and this run
    neither creates nor sets them; their clients read the key and certificates they were given only
    when they start, so a renewed certificate on the node reaches them only so. They settle as the
    changed ones do.
  - C(action=health) waits up to I(wait_timeout) seconds until the worker at the first of I(urls)
    answers and lists the connectors; it joined its group and read the config topic.
options:
  action: {type: str, choices: [reconcile, health], default: reconcile, description: What to do.}
  urls:
    type: list
    elements: str
    required: true
    description: "The workers' REST URLs; the first that answers serves."
  connectors:
    type: list
    elements: dict
    default: []
    description: "Desired connectors, each {name, config}: values become strings, as Connect keeps them."
  remove_unlisted: {type: bool, default: true, description: Delete the connectors that are not listed.}
  wait_timeout: {type: int, default: 120, description: Seconds to wait for connectors and tasks to run.}
  settle_seconds:
    type: int
    default: 30
    description: Seconds a created or changed connector and its tasks must run in a row.
  restart:
    type: list
    elements: str
    default: []
    description: Connectors to restart with their tasks, when they run and this run leaves their config.
author: pikit
"""

RETURN = r"""
created: {description: Connectors created, type: list, returned: always}
updated: {description: Connectors whose config was set, type: list, returned: always}
deleted: {description: Connectors deleted, type: list, returned: always}
restarted: {description: Connectors restarted with their tasks, type: list, returned: always}
states:
  description: "{name: {connector: state, tasks: [state], traces}} after the run"
  type: dict
  returned: always
"""

ARGUMENT_SPEC: dict[str, Any] = {
    "action": {"type": "str", "choices": ["reconcile", "health"], "default": "reconcile"},
    "urls": {"type": "list", "elements": "str", "required": True},
    "connectors": {"type": "list", "elements": "dict", "default": []},
    "remove_unlisted": {"type": "bool", "default": True},
    "wait_timeout": {"type": "int", "default": 120},
    "settle_seconds": {"type": "int", "default": 30},
    "restart": {"type": "list", "elements": "str", "default": []},
}

# Connect answers 409 while its group rebalances (a worker started or left) and 503 while a worker
# starts: the request is retried until the deadline. A starting worker's REST server answers 404
# before it serves its resources, so a 404 for the list of connectors (which always exists) is too.
RETRYABLE = (409, 503)
LISTING = "/connectors?"


class ConnectError(Exception):
    """Connect refused a request, or no worker answered; the message is Connect's own."""


@dataclass
class Plan:
    create: list[str] = field(default_factory=list)
    update: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return bool(self.create or self.update or self.delete or self.restart)


def as_strings(config: dict[str, Any]) -> dict[str, str]:
    """A config as Connect keeps it: every value a string, booleans as Java writes them."""
    return {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in config.items()}


def desired_configs(connectors: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """{name: config} of the listed connectors, each config naming its connector; a name listed twice,
    a connector without a class, or a config naming another connector is refused."""
    out: dict[str, dict[str, str]] = {}
    for entry in connectors:
        name = str(entry.get("name", ""))
        if not name:
            raise ValueError(f"a connector without a name: {entry}")
        if name in out:
            raise ValueError(f"connector {name} is listed twice")
        config = as_strings(entry.get("config") or {})
        if "connector.class" not in config:
            raise ValueError(f"connector {name}: its config names no connector.class")
        if config.setdefault("name", name) != name:
            raise ValueError(f"connector {name}: its config names another connector, {config['name']}")
        out[name] = config
    return out


def plan(
    desired: dict[str, dict[str, str]],
    current: dict[str, dict[str, str]],
    remove_unlisted: bool,
    restart: list[str] | None = None,
) -> Plan:
    """What to create, set, delete and restart so that the workers run exactly the desired
    connectors, those in `restart` started anew: a connector created or set starts anew anyway."""
    update = sorted(name for name in desired if name in current and current[name] != desired[name])
    return Plan(
        create=sorted(set(desired) - set(current)),
        update=update,
        delete=sorted(set(current) - set(desired)) if remove_unlisted else [],
        restart=sorted(
            name for name in set(restart or []) if name in current and name in desired and name not in update
        ),
    )


def refusals(name: str, validation: dict[str, Any]) -> list[str]:
    """Connect's validation messages for one connector, each naming the key it is about."""
    out: list[str] = []
    for entry in validation.get("configs", []):
        value = entry.get("value", {})
        out.extend(f"{name}: {value.get('name')}: {error}" for error in value.get("errors", []))
    if validation.get("error_count", 0) and not out:
        out.append(f"{name}: Connect counted {validation['error_count']} errors without naming a key")
    return out


def states(status: dict[str, Any]) -> dict[str, Any]:
    """{name: {connector, tasks, configured, traces}} from GET /connectors?expand=status&expand=info:
    `configured` counts the tasks the connector made (MirrorMaker's checkpoint connector makes none
    until there is a consumer group to checkpoint), `tasks` the states of those that report one."""
    out = {}
    for name, entry in status.items():
        state = entry.get("status", {})
        tasks = state.get("tasks", [])
        out[name] = {
            "connector": state.get("connector", {}).get("state", "UNASSIGNED"),
            "tasks": [task.get("state", "UNASSIGNED") for task in tasks],
            "configured": len(entry.get("info", {}).get("tasks", tasks)),
            "traces": [
                (task.get("trace") or "").splitlines()[0] for task in tasks if task.get("state") == "FAILED"
            ],
        }
    return out


def unsettled(wanted: list[str], seen: dict[str, Any]) -> list[str]:
    """The wanted connectors that do not run: missing, not RUNNING, a task not RUNNING, or a task
    made that reports no state yet."""
    out: list[str] = []
    for name in wanted:
        entry = seen.get(name)
        if entry is None:
            out.append(f"{name}: not listed yet")
        elif (
            entry["connector"] != "RUNNING"
            or set(entry["tasks"]) - {"RUNNING"}
            or len(entry["tasks"]) < entry["configured"]
        ):
            out.append(
                f"{name}: connector {entry['connector']}, tasks {entry['tasks']} {entry['traces']}".rstrip()
            )
    return out


class Workers:
    """The REST API of a Connect cluster: any worker forwards what only the leader may do."""

    def __init__(self, urls: list[str], deadline: float, timeout: float = 15) -> None:
        self.urls = [url.rstrip("/") for url in urls]
        self.deadline = deadline
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None) -> Any:
        failures: list[str] = []
        while True:
            for url in self.urls:
                request = urllib.request.Request(
                    url + path,
                    method=method,
                    data=None if body is None else json.dumps(body).encode(),
                    headers={"Content-Type": "application/json", "Accept": "application/json"},
                )
                try:
                    with urllib.request.urlopen(request, timeout=self.timeout) as response:
                        text = response.read().decode()
                        return json.loads(text) if text else None
                except urllib.error.HTTPError as exc:
                    message = _message(exc)
                    if exc.code not in RETRYABLE and not (exc.code == 404 and path.startswith(LISTING)):
                        raise ConnectError(f"{method} {path}: {exc.code} {message}") from exc
                    failures.append(f"{url}: {message}")
                except OSError as exc:  # refused, unreachable, timed out: try the next worker
                    failures.append(f"{url}: {exc}")
            if time.monotonic() > self.deadline:
                raise ConnectError(f"{method} {path}: no worker served in time ({'; '.join(failures[-3:])})")
            time.sleep(1)

    def configs(self) -> dict[str, dict[str, str]]:
        listed = self.call("GET", "/connectors?expand=info") or {}
        return {name: entry["info"]["config"] for name, entry in listed.items()}

    def states(self) -> dict[str, Any]:
        return states(self.call("GET", "/connectors?expand=status&expand=info") or {})

    def validate(self, config: dict[str, str]) -> dict[str, Any]:
        plugin = urllib.parse.quote(config["connector.class"], safe="")
        result: dict[str, Any] = self.call("PUT", f"/connector-plugins/{plugin}/config/validate", config)
        return result


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read().decode()).get("message", exc.reason))
    except ValueError:
        return str(exc.reason)


def reconcile(params: dict[str, Any], check: bool) -> dict[str, Any]:
    deadline = time.monotonic() + params["wait_timeout"]
    workers = Workers(params["urls"], deadline)
    desired = desired_configs(params["connectors"])
    todo = plan(desired, workers.configs(), params["remove_unlisted"], params["restart"])
    refused: list[str] = []
    for name in todo.create + todo.update:
        try:
            refused += refusals(name, workers.validate(desired[name]))
        except ConnectError as exc:  # an unknown class: Connect names it
            refused.append(f"{name}: {exc}")
    if refused:
        raise ConnectError("Connect refused these configs; nothing was changed:\n" + "\n".join(refused))
    result: dict[str, Any] = {
        "changed": todo.changes,
        "created": todo.create,
        "updated": todo.update,
        "deleted": todo.delete,
        "restarted": todo.restart,
    }
    if check:
        result["states"] = {}
        return result
    for name in todo.create + todo.update:
        workers.call("PUT", f"/connectors/{urllib.parse.quote(name, safe='')}/config", desired[name])
    for name in todo.delete:
        workers.call("DELETE", f"/connectors/{urllib.parse.quote(name, safe='')}")
    for name in todo.restart:
        workers.call("POST", f"/connectors/{urllib.parse.quote(name, safe='')}/restart?includeTasks=true")
    changed = set(todo.create + todo.update + todo.restart)
    running_since: float | None = None
    while True:
        seen = workers.states()
        waiting = unsettled(sorted(desired), seen)
        failed = [line for line in waiting if "FAILED" in line]
        now = time.monotonic()
        running_since = None if waiting else (running_since or now)
        settled = running_since is not None and (
            not changed or now - running_since >= params["settle_seconds"]
        )
        if settled or failed or now > deadline:
            break
        time.sleep(1)
    result["states"] = seen
    if waiting:
        result["failed"] = True
        result["msg"] = "connectors not running: " + "; ".join(waiting)
    return result


def health(params: dict[str, Any]) -> dict[str, Any]:
    """The first worker serves: it answers and lists the cluster's connectors (it joined the group
    and read the config topic). A failed connector does not hold the gate: the restart may mend it."""
    worker = Workers(params["urls"][:1], time.monotonic() + params["wait_timeout"])
    return {"changed": False, "states": worker.states()}


def params_with_defaults(**given: Any) -> dict[str, Any]:
    """The module's parameters as Ansible would pass them: `given` over ARGUMENT_SPEC's defaults."""
    return {name: spec.get("default") for name, spec in ARGUMENT_SPEC.items()} | given


def run(params: dict[str, Any], check: bool) -> dict[str, Any]:
    if params["action"] == "health":
        return health(params)
    return reconcile(params, check)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run(module.params, module.check_mode)
    except (ConnectError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
