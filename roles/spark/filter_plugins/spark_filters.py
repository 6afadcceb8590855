"""Filters of the spark role: logic that would otherwise be loops in Jinja."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

SPARK_SUBMIT = "/usr/local/bin/spark-submit"


def spark_services(
    node: Mapping[str, Any],
    *,
    master: bool,
    worker: bool,
    history: bool,
    master_url: str,
    master_port: int,
    master_webui_port: int,
    worker_port: int,
    worker_webui_port: int,
    data_dir: str,
) -> list[dict[str, str]]:
    """The daemons this node runs, each {name, what, args} for the unit template: the master (and
    the history server when enabled) on the master, a worker offering the node's sized cores and
    memory on a worker."""
    out = []
    if master:
        out.append(
            {
                "name": "spark-master",
                "what": "master",
                "args": f"org.apache.spark.deploy.master.Master --host {node['address']} --port {master_port}"
                f" --webui-port {master_webui_port}",
            }
        )
        if history:
            out.append(
                {
                    "name": "spark-history",
                    "what": "history server",
                    "args": "org.apache.spark.deploy.history.HistoryServer",
                }
            )
    if worker:
        out.append(
            {
                "name": "spark-worker",
                "what": "worker",
                "args": f"org.apache.spark.deploy.worker.Worker --host {node['address']} --port {worker_port}"
                f" --webui-port {worker_webui_port} --cores {node['cores']} --memory {node['memory_mb']}m"
                f" --work-dir {data_dir}/work {master_url}",
            }
        )
    return out


def spark_app_options(options: Mapping[str, Any]) -> list[str]:
    """An app's options as its command line: `name_with_underscores: value` is `--name-with-underscores
    value`; a list repeats the option for each item; true is the flag alone; none, false and "" leave
    the option out, to the app's own default."""
    argv: list[str] = []
    for name, value in options.items():
        flag = "--" + str(name).replace("_", "-")
        if value is None or value is False or value == "":
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list | tuple):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def spark_submit_argv(
    app: str,
    spec: Mapping[str, Any],
    *,
    master_url: str,
    driver_host: str,
    apps_dir: str,
    options: Mapping[str, Any],
    extra: str = "",
) -> list[str]:
    """spark-submit's argv for the bundled app `app` (`spec`, one of spark_apps): the driver on this
    host in client mode, the app's bundle and script from `apps_dir`, then `options` (typed values,
    spark_app_options) and last `extra`, a command line as a person types it (`-e app_args=...`),
    so that it overrides."""
    argv = [SPARK_SUBMIT, "--master", master_url, "--deploy-mode", "client", "--name", app]
    argv += ["--conf", f"spark.driver.host={driver_host}"]
    argv += ["--total-executor-cores", str(int(spec.get("total_cores", 1)))]
    argv += ["--py-files", f"{apps_dir}/{app}.zip", f"{apps_dir}/{app}.py"]
    return argv + spark_app_options(options) + shlex.split(extra or "")


def spark_plan(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """What this node does, from explicit inputs: the inventory's (`masters`, `active_workers`: the
    workers less those decommissioned) and the nodes' (`nodes`: each host's spark_node fact, which
    tasks/facts.yml set), once per run (tasks/plan.yml).

    PySpark runs the apps' Python on the driver (the master's node) and on every executor, and
    refuses two minor versions: a worker whose Python is not the master's is held out of service,
    as if decommissioned, until both run one Raspberry Pi OS release."""
    nodes, host = inputs["nodes"], inputs["host"]
    master = (inputs["masters"] or [None])[0]
    python = (nodes.get(master) or {}).get("python")
    held_out = (
        [w for w in inputs["active_workers"] if (nodes.get(w) or {}).get("python") != python]
        if python is not None
        else []
    )
    serving = [w for w in inputs["active_workers"] if w not in held_out]
    worker = host in serving
    services = (
        spark_services(
            nodes[host],
            master=host in inputs["masters"],
            worker=worker,
            history=bool(inputs["history"]),
            **inputs["ports"],
        )
        if host in nodes
        else []
    )
    return {
        "held_out": held_out,
        "serving_workers": serving,
        "is_worker": worker,
        "is_leaving": host in inputs["workers"] and not worker,
        "services": services,
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "spark_plan": spark_plan,
            "spark_services": spark_services,
            "spark_submit_argv": spark_submit_argv,
        }
