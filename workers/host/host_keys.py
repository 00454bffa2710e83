"""The key ledger of a host's workers: given, found beside an embedded store, or opened from the
connection string (Azure's blob container); opened only when a worker reads it.

An Azure connection string that names no blob endpoint has no ledger: idempotent handling is
then refused at start (it cannot work), and the default cancel check is left off, logged once
(``key_ledger_unavailable``), so a queue-only deployment runs as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.key_connection import open_key_ledger
from cloudqueue.listener.stores.key_ledger import key_ledger_for
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.host.key_controls import wants_key_ledger
from cloudqueue.workers.settings import CloudQueueSettings

log = structlog.get_logger(__name__)


class HostKeyLedger:
    """The one key ledger a host's workers share, closed with the host if it opened it."""

    def __init__(
        self,
        settings: CloudQueueSettings,
        storage: QueueStorage,
        given: KeyLedger | None,
        worker_settings: Sequence[CloudQueueSettings],
        *,
        chains: bool = False,
        completions: bool = False,
    ) -> None:
        """``chains``: a worker has ``then``, whose effect-once marks the ledger holds;
        ``completions``: a worker's items are ``GroupDone``, handled idempotently by default
        (``key_controls``), or handled unchecked where the ledger cannot be opened."""
        self.ledger = given
        self._owned = False
        wanted = chains or completions or any(wants_key_ledger(s) for s in worker_settings)
        if given is not None or not wanted:
            return
        self.ledger = key_ledger_for(storage)
        if self.ledger is not None:
            return
        try:
            self.ledger = open_key_ledger(
                settings.connection_string_value(), credential=settings.credential
            )
        except ConfigurationError as error:
            if chains or any(s.idempotency.window_s for s in worker_settings):
                needs = "then" if chains else "idempotency.window_s"
                raise ConfigurationError(
                    f"{needs} needs the key ledger in the account's blob storage: "
                    "add BlobEndpoint=... to the connection string"
                ) from None
            log.info("key_ledger_unavailable", reason=str(error), cancel_checks="off")
            return
        self._owned = True

    def close(self) -> None:
        if self._owned and self.ledger is not None:
            self.ledger.close()

    def __repr__(self) -> str:
        return f"HostKeyLedger({self.ledger!r})"


__all__ = ["HostKeyLedger"]
