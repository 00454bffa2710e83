"""The key ledger of a host's workers: given, found beside an embedded store, or opened from the
connection string (Azure's blob container); opened only when a worker reads it."""

from __future__ import annotations

from collections.abc import Sequence

from listener.stores.key_connection import open_key_ledger
from listener.stores.key_ledger import key_ledger_for
from listener.stores.key_records import KeyLedger
from listener.stores.storage import QueueStorage
from workers.key_controls import wants_key_ledger
from workers.settings import CloudQueueSettings


class HostKeyLedger:
    """The one key ledger a host's workers share, closed with the host if it opened it."""

    def __init__(
        self,
        settings: CloudQueueSettings,
        storage: QueueStorage,
        given: KeyLedger | None,
        worker_settings: Sequence[CloudQueueSettings],
    ) -> None:
        self.ledger = given
        self._owned = False
        if given is not None or not any(wants_key_ledger(s) for s in worker_settings):
            return
        self.ledger = key_ledger_for(storage)
        if self.ledger is None:
            self.ledger = open_key_ledger(
                settings.connection_string_value(), credential=settings.credential
            )
            self._owned = True

    def close(self) -> None:
        if self._owned and self.ledger is not None:
            self.ledger.close()

    def __repr__(self) -> str:
        return f"HostKeyLedger({self.ledger!r})"


__all__ = ["HostKeyLedger"]
