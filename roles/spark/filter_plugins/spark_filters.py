"""Filters of the spark role: logic that would otherwise be loops in Jinja."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"spark_services": spark_services}
