"""Filters of the kafka role: logic that would otherwise be loops in Jinja."""

from __future__ import annotations

from typing import Any

SCRAM_MECHANISM = "SCRAM-SHA-512"


def kafka_scram_format_args(credentials: list[dict[str, str]], iterations: int) -> list[str]:
    """`kafka-storage format` arguments that put these SCRAM users in the new cluster's metadata.

    The password is quoted, so that `[` `]` `=` and spaces in it are taken literally; the
    tool splits on commas even inside quotes, so a comma or a double quote cannot be written
    (the role's validation refuses both before any host is touched).
    """
    args: list[str] = []
    for user in credentials:
        if '"' in user["password"] or "," in user["password"]:
            name = user["name"]
            raise ValueError(f"kafka_scram_users: the password of {name} holds a comma or a double quote")
        spec = f'name={user["name"]},iterations={int(iterations)},password="{user["password"]}"'
        args += ["--add-scram", f"{SCRAM_MECHANISM}=[{spec}]"]
    return args


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kafka_scram_format_args": kafka_scram_format_args}
