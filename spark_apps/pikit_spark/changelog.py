"""An app's state kept in Kafka: a compacted topic of one record per device, written in the
micro-batch's transaction beside its outputs and its source offsets (docs/design/any-pi-dies.md).

A device's record holds every row of every state table that names it: its seq mark, its open
windows, its baseline. A device whose rows are all gone gets a tombstone. The record is keyed by
the device, as the agent keys its readings, and the state topic has as many partitions as the
readings topic: Kafka's default partitioner puts a device's state in the partition number of its
readings, so the state of readings partition k is state partition k.

A driver started on any Pi reads the topic to its end with read_committed and holds the state of
the last committed batch; what a batch that never committed wrote is never read. Nothing of the
state lives on the driver's disk.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pikit_contract.topics import read_partition, read_to_end

from pikit_spark.sink import Change
from pikit_spark.state import Tables, columns

# A device's state: its rows of each table, as lists in the table's column order.
Document = dict[str, list[list[Any]]]


def device_tables(schemas: Mapping[str, str]) -> None:
    """Refuses a table that is not keyed by device: its rows would belong to no record."""
    for name, ddl in schemas.items():
        if columns(ddl)[0] != "device":
            raise ValueError(f"state table {name} does not start with a device column: {ddl}")


def documents(tables: Tables) -> dict[str, Document]:
    """The tables' rows grouped by device (the first column of every state table)."""
    docs: dict[str, Document] = {}
    for name, rows in tables.items():
        for row in rows:
            docs.setdefault(row[0], {}).setdefault(name, []).append(list(row))
    for doc in docs.values():
        for listed in doc.values():
            listed.sort(key=_order)
    return docs


def changes(before: Tables, after: Tables) -> list[Change]:
    """The records that take the topic from `before` to `after`: a device whose rows changed gets
    its whole new document, one whose rows are gone a tombstone; an unchanged device, nothing."""
    return changes_between(documents(before), documents(after))


def changes_between(old: dict[str, Document], new: dict[str, Document]) -> list[Change]:
    """`changes`, from the devices' documents on both sides."""
    records: list[Change] = [
        (device.encode(), _encode(doc), []) for device, doc in new.items() if old.get(device) != doc
    ]
    records.extend((device.encode(), None, []) for device in old.keys() - new.keys())
    return records


def read_state(
    topic: str,
    schemas: Mapping[str, str],
    client: Mapping[str, Any],
    timeout: float = 60.0,
    partition: int | None = None,
) -> Tables:
    """The state the topic holds at its committed end (of one partition's devices, when given): the
    newest document of each device, as the tables' rows (tuples in column order, as VersionedTables
    gives them). A missing topic is an error, not an empty state."""
    device_tables(schemas)
    only = None if partition is None else [partition]
    read = read_to_end(topic, timeout, missing_ok=False, only=only, **_bounded(client, timeout))
    latest = {r.key: r.value for r in read}
    return tables_of({key: json.loads(value) for key, value in latest.items() if value is not None}, schemas)


def _bounded(client: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    # Each request bounded: a cold start reads every device's document once.
    return {**client, "request_timeout_ms": int(min(timeout, 30) * 1000)}


def catch_up(
    topic: str,
    partition: int,
    since: int,
    held: Mapping[str, Document],
    client: Mapping[str, Any],
    timeout: float = 60.0,
) -> tuple[dict[str, Document], int]:
    """`held`, the documents of one partition of the state topic as of offset `since`, brought to
    its committed end: each later record replaces its device's document, a tombstone removes it.
    From offset 0 with nothing held, the partition read whole. The documents, and the offset they
    hold the partition through. Exact while the tombstones since `since` are kept (the topic's
    delete.retention.ms, a day by default)."""
    records, end = read_partition(topic, partition, since, timeout, **_bounded(client, timeout))
    docs = dict(held)
    for record in records:
        device = record.key.decode()
        if record.value is None:
            docs.pop(device, None)
        else:
            docs[device] = json.loads(record.value)
    return docs, end


def tables_of(docs: Mapping[str, Document], schemas: Mapping[str, str]) -> Tables:
    """The devices' documents as the tables' rows (a table a later release dropped passed over)."""
    tables: Tables = {name: [] for name in schemas}
    for doc in docs.values():
        for name, rows in doc.items():
            if name in tables:
                tables[name].extend(tuple(row) for row in rows)
    return tables


class KafkaState:
    """An app's state between micro-batches, for one driver: read from the topic once when the
    driver starts, then kept in memory, grouped by device as the topic holds it. A batch takes
    `before()`, computes its next state, and sends `changes_to(after)` in its transaction; only
    once that commits does `committed()` make `after` the next batch's `before()`. A batch that
    fails leaves the state as it was, and a driver that dies leaves the topic at the last commit
    for the next one, on any Pi."""

    def __init__(self, topic: str, schemas: Mapping[str, str], client: Mapping[str, Any]) -> None:
        device_tables(schemas)
        self.topic, self.schemas, self.client = topic, dict(schemas), dict(client)
        self._held: tuple[Tables, dict[str, Document]] | None = None
        self._pending: tuple[Tables, dict[str, Document]] | None = None  # changes_to's, uncommitted

    def before(self) -> Tables:
        return {name: list(rows) for name, rows in self._state()[0].items()}

    def changes_to(self, after: Tables) -> list[Change]:
        kept = {name: [tuple(row) for row in after.get(name, [])] for name in self.schemas}
        self._pending = (kept, documents(kept))
        return changes_between(self._state()[1], self._pending[1])

    def committed(self) -> None:
        """The state `changes_to` was last given is the topic's now: its transaction committed."""
        if self._pending is None:
            raise RuntimeError("committed() without changes_to(): nothing was sent")
        self._held, self._pending = self._pending, None

    def forget(self) -> None:
        """Read the topic again before the next batch: another driver committed to it."""
        self._held = self._pending = None

    def _state(self) -> tuple[Tables, dict[str, Document]]:
        if self._held is None:
            tables = read_state(self.topic, self.schemas, self.client)
            self._held = (tables, documents(tables))
        return self._held


def _encode(doc: Document) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _order(row: list[Any]) -> tuple[str, ...]:
    # Rows of a table in a stable order, so that an unchanged device compares equal whatever order
    # the fold produced them in.
    return tuple(repr(value) for value in row)
