"""Opening the key ledger (``cloudqueue.listener.stores.key_records``) that goes with a connection
string: a table in the SQLite file, memory, or the ``cloudqueue-keys`` blob container of the
account."""

from __future__ import annotations

from pathlib import Path

from cloudqueue.listener.stores.connection import (
    DEFAULT_PATH,
    MemoryTarget,
    SqliteTarget,
    check_blob_endpoint,
    parse_connection_string,
)
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.stores.token_connection import open_token_key_ledger, token_target


def open_key_ledger(
    connection_string: str | None,
    *,
    default_path: Path = DEFAULT_PATH,
    credential: str | None = None,
) -> KeyLedger:
    """The ledger of message keys (idempotency, cancelling, effect-once publishing) in the store
    the connection string names.

    SQLite: a table in the same file. Memory: a new in-memory ledger (this process only; a
    listener and a publisher on one ``InMemoryQueueStorage`` share ``key_ledger_for(storage)``).
    Azure: the ``cloudqueue-keys`` blob container of the same account.
    """
    token = token_target(connection_string, credential)
    if token is not None:
        return open_token_key_ledger(token)
    target = parse_connection_string(connection_string, default_path=default_path)
    if isinstance(target, MemoryTarget):
        from cloudqueue.listener.stores.key_ledger import InMemoryKeyLedger

        return InMemoryKeyLedger()
    if isinstance(target, SqliteTarget):
        from cloudqueue.listener.stores.key_ledger import SqliteKeyLedger
        from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage

        return SqliteKeyLedger(SqliteQueueStorage(target.path), owns=True)
    check_blob_endpoint(target.connection_string)
    from cloudqueue.listener.stores.azure_keys import AzureKeyLedger

    return AzureKeyLedger.from_connection_string(target.connection_string)


__all__ = ["open_key_ledger"]
