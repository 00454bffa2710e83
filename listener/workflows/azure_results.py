"""The result store on Azure: the ``cloudqueueresults`` table of the queues' account (the Table
service, the ``tables`` extra), a row per result (``cloudqueue.listener.workflows.result_store``).

Where a result lives: a member of a group in its group's partition (``g-`` and the group id), so
that ``for_group`` is one partition query; and every result, member or not, in a partition of its
own key (``k-`` and the key's SHA-256, as a key may hold characters a row key may not), so that
``get`` -- what a waiting producer repeats -- is one point read. A member's result is therefore
written twice (two upserts, each idempotent: a redelivery writes the same again).

A row holds the key as given, its group, its expiry (``expires``, UTC) and the value's UTF-8 bytes
in up to ``MAX_PARTS`` binary properties of 64 KiB (the service's limit per property, checked on
Azurite: 65,536 bytes accepted, one more refused; an entity is at most 1 MiB, and Azurite counts
binary values as sent, in base64: 11 parts fit, 12 do not). A larger value is
refused with one error (``MessageTooLargeError``) rather than kept as a claim check in the payload
store: a result is what a handler returns for an aggregating step, a blob per large result would
need the account's blob service and an expiry sweep of its own, and a handler with a large output
can store it itself and return its name.

Expired rows read as absent; a background sweep deletes them (at most ``SWEEP_LIMIT`` rows, at
most once per ``SWEEP_INTERVAL_S`` per process, started by a ``put``), each delete conditional on
the row's ETag so that a result written again meanwhile stays.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import TYPE_CHECKING, Any

import structlog
from azure.core import MatchConditions

from cloudqueue.listener import errors
from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.stores.key_records import SWEEP_INTERVAL_S
from cloudqueue.listener.workflows.table_calls import hashed_key, quoted_key, read_row, table_call

if TYPE_CHECKING:
    from azure.data.tables import TableClient

__all__ = ["MAX_PARTS", "MAX_RESULT_BYTES", "RESULTS_TABLE", "SWEEP_LIMIT", "AzureResultStore"]

log = structlog.get_logger(__name__)

RESULTS_TABLE = "cloudqueueresults"
PART_BYTES = 65_536
MAX_PARTS = 11
MAX_RESULT_BYTES = PART_BYTES * MAX_PARTS
"""704 KiB: what one entity holds beside its keys and other properties, as the emulator measures
it too (binary sent as base64: 11 parts of 64 KiB fit its 1 MiB, 12 do not)."""
SWEEP_LIMIT = 1_000


class AzureResultStore:
    """Results in the account's Table service, each under its key (and its group)."""

    def __init__(self, table: TableClient, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._table = table
        self._clock = clock
        self._lock = threading.Lock()
        self._next_sweep = clock.monotonic() + SWEEP_INTERVAL_S
        self._sweeping: threading.Thread | None = None

    def put(self, key: str, value: str, *, ttl_s: float, group_id: str | None = None) -> None:
        data = value.encode("utf-8")
        if len(data) > MAX_RESULT_BYTES:
            raise errors.MessageTooLargeError(
                f"a result of {len(data):,} bytes is over the {MAX_RESULT_BYTES:,} bytes a result "
                "keeps in Azure's Table service: return less (or store it yourself and return "
                "where)"
            )
        expires = self._clock.now() + timedelta(seconds=ttl_s)
        fields: dict[str, Any] = {"key": key, "expires": expires, "parts": 0}
        for part, start in enumerate(range(0, len(data), PART_BYTES)):
            fields[f"value{part}"] = data[start : start + PART_BYTES]
            fields["parts"] = part + 1
        if group_id is not None:
            fields["group"] = group_id
            self._upsert(group_partition(group_id), key, fields)
        self._upsert(key_partition(key), key, fields)
        self._sweep_if_due()

    def get(self, key: str) -> str | None:
        row = read_row(self._table, key_partition(key), hashed_key(key))
        return None if row is None or self._expired(row) else value_of(row)

    def for_group(self, group_id: str) -> Iterator[tuple[str, str]]:
        with table_call("read a group's results"):
            rows = list(
                self._table.query_entities(
                    "PartitionKey eq @group", parameters={"group": group_partition(group_id)}
                )
            )
        for row in rows:
            if not self._expired(row):
                yield str(row["key"]), value_of(row)

    def sweep(self) -> int:
        """Delete up to ``SWEEP_LIMIT`` expired rows; how many were deleted."""
        now, deleted = self._clock.now(), 0
        with table_call("list expired results"):
            expired = list(
                islice(
                    self._table.query_entities(
                        "expires lt @now",
                        parameters={"now": now},
                        select=["PartitionKey", "RowKey"],
                    ),
                    SWEEP_LIMIT,
                )
            )
        for row in expired:
            try:
                with table_call("delete an expired result"):
                    self._table.delete_entity(
                        row,
                        etag=row.metadata["etag"],
                        match_condition=MatchConditions.IfNotModified,
                    )
                deleted += 1
            except errors.StorageError:
                continue  # written again meanwhile (412), or gone: either way not ours to delete
        log.info("results_swept", deleted=deleted, table=RESULTS_TABLE)
        return deleted

    def close(self) -> None:
        self._table.close()

    def _upsert(self, partition: str, key: str, fields: dict[str, Any]) -> None:
        from azure.data.tables import UpdateMode

        entity = {"PartitionKey": partition, "RowKey": hashed_key(key), **fields}
        with table_call("store a result"):
            self._table.upsert_entity(entity, mode=UpdateMode.REPLACE)

    def _expired(self, row: dict[str, Any]) -> bool:
        expires: datetime = row["expires"]
        return datetime.fromtimestamp(expires.timestamp(), UTC) <= self._clock.now()

    def _sweep_if_due(self) -> None:
        with self._lock:
            due = self._clock.monotonic() >= self._next_sweep
            if not due or (self._sweeping is not None and self._sweeping.is_alive()):
                return
            self._next_sweep = self._clock.monotonic() + SWEEP_INTERVAL_S
            self._sweeping = threading.Thread(
                target=self._sweep_quietly, name="cloudqueue:result-sweep", daemon=True
            )
            self._sweeping.start()

    def _sweep_quietly(self) -> None:
        try:
            self.sweep()
        except errors.StorageError as error:
            log.warning("results_sweep_failed", error=str(error))

    def __repr__(self) -> str:
        return f"AzureResultStore(table={RESULTS_TABLE!r})"


def key_partition(key: str) -> str:
    return f"k-{hashed_key(key)}"


def group_partition(group_id: str) -> str:
    return f"g-{quoted_key(group_id)}"


def value_of(row: dict[str, Any]) -> str:
    parts = int(row.get("parts", 0))
    return b"".join(bytes(row[f"value{part}"]) for part in range(parts)).decode("utf-8")
