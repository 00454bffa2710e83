"""Calls to the account's Table service for the workflow stores (groups, results), their SDK
exceptions turned into the project's at one boundary (``cloudqueue.listener.stores.azure_errors``:
safe parts only, never the SDK's text), and what a failed entity-group transaction means.

An entity-group transaction fails as a whole (nothing of it is written) with one
``TableTransactionError`` naming the first operation that failed (``index``) and why (checked on
Azurite 3.37 with azure-data-tables 12.7): ``EntityAlreadyExists`` (HTTP 409) for a ``create`` of a
row that exists, ``UpdateConditionNotSatisfied`` (HTTP 412) for an ``If-Match`` update of a row
that changed since it was read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, ResourceNotFoundError

from cloudqueue.listener.stores.azure_errors import error_code, translate_error

if TYPE_CHECKING:
    from azure.data.tables import TableClient

Rejection = Literal["exists", "changed"]
"""Why a transaction was refused: a created row exists (409), or a read row changed (412)."""

__all__ = [
    "Rejection",
    "hashed_key",
    "if_match",
    "quoted_key",
    "read_row",
    "submit",
    "table_call",
    "transact",
    "update_if_match",
    "update_merged",
]


@contextmanager
def table_call(operation: str) -> Iterator[None]:
    """Run SDK calls, turning their exceptions into the project's StorageErrors."""
    try:
        yield
    except AzureError as error:
        raise translate_error(error, operation=operation, queue_name="") from None


def read_row(table: TableClient, partition: str, row: str) -> dict[str, Any] | None:
    """One row by its keys (its ETag under ``etag``); None when there is none."""
    with table_call("read a table row"):
        try:
            entity = table.get_entity(partition, row)
        except ResourceNotFoundError:
            return None
    return {**entity, "etag": entity.metadata["etag"]}


def submit(
    table: TableClient, operations: list[tuple[Any, ...]], operation: str
) -> tuple[Rejection, int] | None:
    """Submit one entity-group transaction: None when it was written, else why it was refused
    and the position of the operation that refused it (any other failure raises)."""
    outcome = transact(table, operations, operation)
    return outcome if isinstance(outcome, tuple) else None


def transact(
    table: TableClient, operations: list[tuple[Any, ...]], operation: str
) -> list[Mapping[str, Any]] | tuple[Rejection, int]:
    """``submit``, answering a written transaction with the service's answer per operation, in
    their order (each row's new ``etag``)."""
    try:
        return table.submit_transaction(operations)
    except AzureError as error:
        rejection = _rejection(error)
        if rejection is None:
            raise translate_error(error, operation=operation, queue_name="") from None
        return rejection


def _rejection(error: AzureError) -> tuple[Rejection, int] | None:
    from azure.data.tables import TableTransactionError

    if not isinstance(error, TableTransactionError):
        return None
    code = error_code(error)
    if code == "EntityAlreadyExists":
        return "exists", error.index
    if code == "UpdateConditionNotSatisfied":
        return "changed", error.index
    return None


def if_match(etag: str) -> dict[str, Any]:
    """The options of a transaction's ``update`` that applies only if the row is at ``etag``."""
    from azure.data.tables import UpdateMode

    condition = MatchConditions.IfNotModified
    return {"mode": UpdateMode.MERGE, "etag": etag, "match_condition": condition}


def update_if_match(partition: str, row: str, etag: str, **values: Any) -> tuple[Any, ...]:
    """A transaction's update of ``row``'s ``values``, applied only if the row is at ``etag``."""
    entity = {"PartitionKey": partition, "RowKey": row, **values}
    return ("update", entity, if_match(etag))


def update_merged(partition: str, row: str, **values: Any) -> tuple[Any, ...]:
    """A transaction's update of ``row``'s ``values``, whatever the row holds meanwhile."""
    from azure.data.tables import UpdateMode

    entity = {"PartitionKey": partition, "RowKey": row, **values}
    return ("update", entity, {"mode": UpdateMode.MERGE})


def quoted_key(text: str) -> str:
    """``text`` as a valid, readable partition or row key: ``/ \\ # ?``, control characters and
    ``$`` (which starts the stores' own rows) percent-encoded."""
    return quote(text, safe="")


def hashed_key(text: str) -> str:
    """A fixed-length key for any text (a message key can be longer than a row key may be)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
