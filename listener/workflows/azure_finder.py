"""Finding the workflow stores in the Table service of an Azure storage's account: opened the way
``open_storage`` opened the storage (its connection string, or its token sign-in, Microsoft Entra
ID), one group ledger per storage object, so a publisher and the listeners of one process share it.

The ledger is opened on first use, not when found: a listener on Azure finds it at start, and an
account that keeps no groups (a connection string without a table endpoint, or without the
``tables`` extra installed) then costs nothing and logs one line (``groups_unavailable``), while a
group member arriving there is retried with the reason rather than deleted unrecorded, and
``send_group`` fails with it: ``pip install 'cloudqueue[tables]'``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import structlog

from cloudqueue.listener import errors
from cloudqueue.listener.stores.connection import (
    AzureTarget,
    azure_origin,
    check_table_endpoint,
    parse_connection_string,
)
from cloudqueue.listener.stores.embedded_ledgers import innermost_storage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.stores.token_connection import TokenTarget, token_target
from cloudqueue.listener.workflows.group_ledger import Addition, GroupLedger, GroupStatus, Settled

if TYPE_CHECKING:
    from azure.data.tables import TableClient

    from cloudqueue.listener.workflows.azure_results import AzureResultStore

__all__ = ["azure_group_ledger_for", "azure_result_store", "azure_result_store_for", "open_table"]

log = structlog.get_logger(__name__)


class _Closing(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=_Closing)

_LEDGERS: weakref.WeakKeyDictionary[QueueStorage, GroupLedger] = weakref.WeakKeyDictionary()
_RESULTS: weakref.WeakKeyDictionary[QueueStorage, AzureResultStore] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def azure_group_ledger_for(storage: QueueStorage) -> GroupLedger | None:
    """The group ledger of the account ``storage`` (seen through wrappers) is in, when
    ``open_storage`` opened it; None otherwise."""
    return _per_storage(
        _LEDGERS,
        storage,
        lambda origin, closing: OnFirstUse(lambda: _group_ledger(origin, closing)),
    )


def azure_result_store_for(storage: QueueStorage) -> AzureResultStore | None:
    """The result store of the account ``storage`` (seen through wrappers) is in, when
    ``open_storage`` opened it, one per storage object; None otherwise. Opened at once: a
    ConfigurationError says what is missing (a table endpoint, the ``tables`` extra)."""
    from cloudqueue.listener.workflows.azure_results import RESULTS_TABLE, AzureResultStore

    return _per_storage(
        _RESULTS,
        storage,
        lambda origin, closing: AzureResultStore(open_table(origin, RESULTS_TABLE, closing)),
    )


Closing = Callable[[Callable[[], None]], None]
"""Where to hand what must be closed with a storage (``AzureQueueStorage.close_with``)."""


def _per_storage(
    found: weakref.WeakKeyDictionary[QueueStorage, S],
    storage: QueueStorage,
    make: Callable[[AzureTarget | TokenTarget, Closing | None], S],
) -> S | None:
    """What ``found`` holds for the storage under ``storage``'s wrappers, made once from how
    ``open_storage`` opened it (and given where to hand its own closing: a token credential
    it opens); None for a storage it did not open on Azure."""
    inner = innermost_storage(storage)
    origin = azure_origin(inner)
    if origin is None:
        return None
    with _LOCK:
        if inner not in found:
            found[inner] = make(origin, _closing_of(inner))
            _closed_with(found, inner)
        return found[inner]


def _closing_of(storage: QueueStorage) -> Closing | None:
    from cloudqueue.listener.stores.azure_storage import AzureQueueStorage

    return storage.close_with if isinstance(storage, AzureQueueStorage) else None


def _closed_with(found: weakref.WeakKeyDictionary[QueueStorage, S], storage: QueueStorage) -> None:
    """Close (and forget) what ``found`` holds for ``storage`` when that Azure storage closes,
    so that no table client outlives the storage it was opened for."""
    from cloudqueue.listener.stores.azure_storage import AzureQueueStorage

    if not isinstance(storage, AzureQueueStorage):
        return
    held = weakref.ref(storage)  # the storage's own list of closers keeps it alive otherwise

    def close() -> None:
        closing = held()  # alive: it is the one calling
        with _LOCK:
            kept = None if closing is None else found.pop(closing, None)
        if kept is not None:
            kept.close()

    storage.close_with(close)


def azure_result_store(
    connection_string: str, *, credential: str | None = None
) -> AzureResultStore:
    """The result store in the Table service of the account the connection string names (a
    token sign-in when ``credential`` is set or the string is a service URL)."""
    from cloudqueue.listener.workflows.azure_results import RESULTS_TABLE, AzureResultStore

    token = token_target(connection_string, credential)
    target = token or parse_connection_string(connection_string)
    if not isinstance(target, AzureTarget | TokenTarget):
        raise errors.ConfigurationError("azure_result_store needs an Azure Storage account")
    return AzureResultStore(open_table(target, RESULTS_TABLE))


def open_table(
    origin: AzureTarget | TokenTarget, table_name: str, closing: Closing | None = None
) -> TableClient:
    """A client of ``table_name`` in the account's Table service, signed in as the queues are.
    A token credential it opens for the client (closing the client leaves it open) is handed
    to ``closing``, to be closed with the storage."""
    from cloudqueue.listener.stores.azure_tables import (
        table_from_account_url,
        table_from_connection_string,
    )
    from cloudqueue.listener.stores.credentials import open_credential
    from cloudqueue.listener.workflows.table_calls import table_call

    with table_call(f"open table {table_name}"):  # it is created on first use
        if isinstance(origin, AzureTarget):
            check_table_endpoint(origin.connection_string)
            return table_from_connection_string(origin.connection_string, table_name)
        if origin.table_url is None:
            raise errors.ConfigurationError(
                "the table service URL cannot be derived from the queue service URL: use "
                "QueueEndpoint=...;TableEndpoint=... for groups and results"
            )
        credential = open_credential(origin.credential)
        if closing is not None:
            closing(credential.close)
        return table_from_account_url(origin.table_url, table_name, credential)


def _group_ledger(origin: AzureTarget | TokenTarget, closing: Closing | None) -> GroupLedger:
    from cloudqueue.listener.workflows.azure_groups import GROUPS_TABLE, AzureGroupLedger

    return AzureGroupLedger(open_table(origin, GROUPS_TABLE, closing))


class OnFirstUse:
    """A group ledger opened when first used. Opening refused (no table endpoint, no ``tables``
    extra) is a ConfigurationError naming the reason to a sender (``open``, ``add_members``), a
    StorageError to a listener -- a member is then retried, never deleted unrecorded -- and, for
    ``owed`` at a listener's start, one log line."""

    def __init__(self, opener: Callable[[], GroupLedger]) -> None:
        self._opener = opener
        self._ledger: GroupLedger | None = None
        self._lock = threading.Lock()
        self._told = False

    def open(self, group_id: str, *, total: int, on_complete: str) -> GroupStatus:
        return self._opened().open(group_id, total=total, on_complete=on_complete)

    def add_members(self, group_id: str, count: int, *, by: str | None = None) -> Addition:
        return self._opened().add_members(group_id, count, by=by)

    def mark_added(self, group_id: str, by: str) -> None:
        self._reachable().mark_added(group_id, by)

    def settle(self, group_id: str, member_id: str, outcome: Settled) -> GroupStatus | None:
        return self._reachable().settle(group_id, member_id, outcome)

    def settle_many(
        self, settlements: Sequence[tuple[str, str, Settled]]
    ) -> list[GroupStatus | None]:
        return self._reachable().settle_many(settlements)

    def pass_on(self, group_id: str, member_id: str, step: str, count: int) -> list[str]:
        return self._reachable().pass_on(group_id, member_id, step, count)

    def status(self, group_id: str) -> GroupStatus | None:
        return self._reachable().status(group_id)

    def pending_members(self, group_id: str, limit: int) -> list[str]:
        return self._opened().pending_members(group_id, limit)

    def newest(self, limit: int) -> list[GroupStatus]:
        return self._opened().newest(limit)

    def owed(self) -> list[GroupStatus]:
        try:
            ledger = self._reachable()
        except errors.StorageError as reason:
            if not self._told:
                self._told = True
                log.info("groups_unavailable", reason=str(reason))
            return []
        return ledger.owed()

    def claim(self, group_id: str) -> GroupStatus | None:
        return self._reachable().claim(group_id)

    def release(self, group_id: str) -> None:
        self._reachable().release(group_id)

    def mark_sent(self, group_id: str) -> None:
        self._reachable().mark_sent(group_id)

    def close(self) -> None:
        with self._lock:
            if self._ledger is not None:
                self._ledger.close()

    def _opened(self) -> GroupLedger:
        """The ledger; ConfigurationError when it cannot be opened here (a sender's mistake)."""
        with self._lock:
            if self._ledger is None:
                self._ledger = self._opener()
            return self._ledger

    def _reachable(self) -> GroupLedger:
        """The ledger; StorageError when it cannot be opened (a listener retries the member)."""
        try:
            return self._opened()
        except errors.ConfigurationError as reason:
            raise errors.StorageError(str(reason)) from None

    def __repr__(self) -> str:
        return f"OnFirstUse({self._ledger!r})"
