"""The embedded default store: queues in one SQLite file, with Azure's semantics.

Several processes and threads on one machine may share the file. The database runs in WAL mode
(readers never block the writer) with a busy timeout, every change is one ``BEGIN IMMEDIATE``
transaction (it takes the write lock up front, so two gets can never both read a message as
visible and both take it), and within a process one connection is shared under a lock. Times are
stored as float epoch seconds from the injected clock. Open one instance per process: a SQLite
connection must not cross a ``fork``. The file and its folder are private to their owner
(``file_modes``). The file, its schema and sqlite3's errors are ``sqlite_database``'s; rows and the
messages they hold, ``sqlite_rows``'.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.errors import (
    MessageNotFoundError,
    PopReceiptMismatchError,
)
from cloudqueue.listener.stores._embedded import (
    check_get_arguments,
    check_max_messages,
    check_metadata,
    check_put_arguments,
    check_update_arguments,
    new_message,
    new_pop_receipt,
    peeked,
    queue_not_found,
)
from cloudqueue.listener.stores.sqlite_database import immediate, open_database, translate_errors
from cloudqueue.listener.stores.sqlite_rows import (
    MESSAGE_COLUMNS,
    SELECTED_COLUMNS,
    UNEXPIRED,
    decoded,
    taken,
    to_message,
    to_row,
)
from cloudqueue.listener.stores.storage import QueueMessage, validate_queue_name


class SqliteQueueStorage:
    """Queues in a SQLite file shared safely by the processes and threads of one machine."""

    def __init__(
        self, path: str | Path, *, clock: Clock = SYSTEM_CLOCK, busy_timeout_s: float = 5.0
    ) -> None:
        self._path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._db = open_database(self._path, busy_timeout_s)

    def create_queue(self, queue_name: str) -> None:
        validate_queue_name(queue_name)
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO queues (name) VALUES (?)", (queue_name,))

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        check_get_arguments(max_messages, visibility_timeout_s)
        with self._transaction() as db:
            now = self._now()
            _require_queue(db, queue_name)
            params = {"queue": queue_name, "now": now, "limit": max_messages}
            db.execute("DELETE FROM messages WHERE queue = :queue AND expires_on <= :now", params)
            rows = db.execute(
                f"SELECT {SELECTED_COLUMNS} FROM messages"
                " WHERE queue = :queue AND next_visible_on <= :now ORDER BY seq LIMIT :limit",
                params,
            ).fetchall()
            hidden_until = now + visibility_timeout_s
            got = [taken(decoded(row, queue_name), hidden_until) for row in rows]
            db.executemany(
                "UPDATE messages SET pop_receipt = ?, dequeue_count = ?, next_visible_on = ?"
                " WHERE id = ?",
                [(m.pop_receipt, m.dequeue_count, hidden_until, m.id) for m in got],
            )
        return got

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        with self._transaction() as db:
            deleted = db.execute(
                f"DELETE FROM messages WHERE queue = :queue AND id = :id"
                f" AND pop_receipt = :pop_receipt AND {UNEXPIRED}",
                {
                    "queue": queue_name,
                    "id": message_id,
                    "pop_receipt": pop_receipt,
                    "now": self._now(),
                },
            ).rowcount
            if not deleted:
                _require_queue(db, queue_name)
        return deleted == 1

    def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        ttl_s = check_put_arguments(content, time_to_live_s, visibility_delay_s)
        with self._transaction() as db:
            _require_queue(db, queue_name)
            message = new_message(
                content,
                now=self._clock.now(),
                time_to_live_s=ttl_s,
                visibility_delay_s=visibility_delay_s,
            )
            row = to_row(message)
            db.execute(
                f"INSERT INTO messages (queue, {MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (queue_name, *row),
            )
        # Read back through the row, so put and a later get report identical (float) timestamps.
        return to_message(row)

    def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        check_update_arguments(visibility_timeout_s, content)
        new_receipt = new_pop_receipt()
        with self._transaction() as db:
            now = self._now()
            row = db.execute(
                "SELECT pop_receipt FROM messages"
                f" WHERE queue = :queue AND id = :id AND {UNEXPIRED}",
                {"queue": queue_name, "id": message_id, "now": now},
            ).fetchone()
            if row is None:
                _require_queue(db, queue_name)
                raise MessageNotFoundError(f"message {message_id} is not in queue {queue_name}")
            if row[0] != pop_receipt:
                raise PopReceiptMismatchError(
                    f"message {message_id} in queue {queue_name} was taken again by another get"
                )
            db.execute(
                "UPDATE messages SET pop_receipt = ?, next_visible_on = ?,"
                " content = coalesce(?, content) WHERE id = ?",
                (new_receipt, now + visibility_timeout_s, content, message_id),
            )
        return new_receipt

    def approximate_message_count(self, queue_name: str) -> int:
        with self._lock, translate_errors():
            _require_queue(self._db, queue_name)
            row = self._db.execute(
                f"SELECT count(*) FROM messages WHERE queue = :queue AND {UNEXPIRED}",
                {"queue": queue_name, "now": self._now()},
            ).fetchone()
        return int(row[0])

    def peek_messages(self, queue_name: str, *, max_messages: int) -> list[QueueMessage]:
        check_max_messages(max_messages)
        with self._lock, translate_errors():
            _require_queue(self._db, queue_name)
            rows = self._db.execute(
                f"SELECT {SELECTED_COLUMNS} FROM messages WHERE queue = :queue"
                f" AND next_visible_on <= :now AND {UNEXPIRED} ORDER BY seq LIMIT :limit",
                {"queue": queue_name, "now": self._now(), "limit": max_messages},
            ).fetchall()
        return [peeked(to_message(decoded(row, queue_name))) for row in rows]

    def get_queue_metadata(self, queue_name: str) -> dict[str, str]:
        with self._lock, translate_errors():
            _require_queue(self._db, queue_name)
            row = self._db.execute(
                "SELECT metadata FROM queue_metadata WHERE queue = ?", (queue_name,)
            ).fetchone()
        return {} if row is None else dict(json.loads(row[0]))

    def set_queue_metadata(self, queue_name: str, metadata: Mapping[str, str]) -> None:
        text = json.dumps(check_metadata(metadata))
        with self._transaction() as db:
            _require_queue(db, queue_name)
            db.execute(
                "INSERT OR REPLACE INTO queue_metadata (queue, metadata) VALUES (?, ?)",
                (queue_name, text),
            )

    def list_queues(self, prefix: str = "") -> list[str]:
        with self._lock, translate_errors():
            rows = self._db.execute(
                # substr, not LIKE: a prefix is literal text, with no wildcards to escape.
                "SELECT name FROM queues WHERE substr(name, 1, ?) = ? ORDER BY name",
                (len(prefix), prefix),
            ).fetchall()
        return [str(name) for (name,) in rows]

    def clear_queue(self, queue_name: str) -> None:
        with self._transaction() as db:
            _require_queue(db, queue_name)
            db.execute("DELETE FROM messages WHERE queue = ?", (queue_name,))

    def delete_queue(self, queue_name: str) -> None:
        validate_queue_name(queue_name)
        with self._transaction() as db:
            _require_queue(db, queue_name)
            db.execute("DELETE FROM messages WHERE queue = ?", (queue_name,))
            db.execute("DELETE FROM queue_metadata WHERE queue = ?", (queue_name,))
            db.execute("DELETE FROM queues WHERE name = ?", (queue_name,))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @property
    def clock(self) -> Clock:
        """The clock its times come from (ledgers in the same file use it too)."""
        return self._clock

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction on this file, for tables beside the queues (the ledgers')."""
        return self._transaction()

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads only (no write lock taken: WAL readers see the last commit,
        even while another process holds the write lock)."""
        with self._lock, translate_errors():
            yield self._db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the write lock from its first statement."""
        with self._lock, immediate(self._db) as db:
            yield db

    def _now(self) -> float:
        return self._clock.now().timestamp()

    def __repr__(self) -> str:
        return f"SqliteQueueStorage(path={str(self._path)!r})"


def _require_queue(db: sqlite3.Connection, queue_name: str) -> None:
    if db.execute("SELECT 1 FROM queues WHERE name = ?", (queue_name,)).fetchone() is None:
        raise queue_not_found(queue_name)
