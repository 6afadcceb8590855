"""The admin client of the kafka role's modules: kafka-python, with the admin's mTLS identity."""

from __future__ import annotations

import contextlib
from typing import Any

# Without kafka-python the module fails, naming it (modules/kafka_admin.py: HAS_KAFKA).
with contextlib.suppress(ImportError):
    from kafka.admin import KafkaAdminClient


def client_options(params: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap_servers": params["bootstrap_servers"],
        "security_protocol": params["security_protocol"],
        "request_timeout_ms": 15000,
    }
    if params["security_protocol"] == "SSL":
        options.update(
            ssl_cafile=params["ssl_cafile"], ssl_certfile=params["ssl_certfile"], ssl_check_hostname=True
        )
    return options


def connect(params: dict[str, Any]) -> Any:
    return KafkaAdminClient(**client_options(params))
