"""Tables of one kind beside the queues in their SQLite file (the key ledger's, the results'):
the schema made when they are first opened, expired rows swept at most every
``SWEEP_INTERVAL_S``, and the file closed with them only when it was opened for them."""

from __future__ import annotations

from collections.abc import Sequence

from cloudqueue.listener.stores.key_records import SWEEP_INTERVAL_S
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage


class SqliteTables:
    """Base of a store kept in tables of the queues' SQLite file."""

    def __init__(
        self, database: SqliteQueueStorage, schema: Sequence[str], *, owns: bool = False
    ) -> None:
        """``owns``: close ``database`` with the store (it was opened for it)."""
        self._database = database
        self._clock = database.clock
        self._owns = owns
        self._next_sweep = 0.0
        with database.transaction() as db:
            for statement in schema:
                db.execute(statement)

    def close(self) -> None:
        if self._owns:
            self._database.close()

    def _sweep_due(self) -> bool:
        """True at most once per ``SWEEP_INTERVAL_S``: time to delete the expired rows."""
        if self._clock.monotonic() < self._next_sweep:
            return False
        self._next_sweep = self._clock.monotonic() + SWEEP_INTERVAL_S
        return True


__all__ = ["SqliteTables"]
