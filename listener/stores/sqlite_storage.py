"""The embedded default store: queues in one SQLite file, with Azure's semantics.

Several processes and threads on one machine may share the file. The database runs in WAL mode
(readers never block the writer) with a busy timeout, every change is one ``BEGIN IMMEDIATE``
transaction (it takes the write lock up front, so two gets can never both read a message as
visible and both take it), and within a process one connection is shared under a lock. Times are
stored as float epoch seconds from the injected clock. Open one instance per process: a SQLite
connection must not cross a ``fork``. The file and its folder are private to their owner
(``file_modes``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import structlog

from listener.clock import SYSTEM_CLOCK, Clock
from listener.errors import (
    MessageNotFoundError,
    PopReceiptMismatchError,
    StorageError,
    TransientStorageError,
)
from listener.stores._embedded import (
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
from listener.stores.file_modes import (
    STATE_FOLDER_NAME,
    private_file,
    private_folder,
    tighten_if_present,
)
from listener.stores.storage import QueueMessage, validate_queue_name

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS queues (name TEXT PRIMARY KEY) WITHOUT ROWID",
    """CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        queue TEXT NOT NULL REFERENCES queues (name),
        id TEXT NOT NULL UNIQUE,
        pop_receipt TEXT NOT NULL,
        dequeue_count INTEGER NOT NULL,
        inserted_on REAL NOT NULL,
        expires_on REAL,
        next_visible_on REAL NOT NULL,
        content TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS messages_by_visibility ON messages (queue, next_visible_on)",
    # Lets a get purge expired messages without walking the whole queue.
    "CREATE INDEX IF NOT EXISTS messages_by_expiry ON messages (queue, expires_on)",
    # A table of its own, not a column of queues: files made before it get it on open.
    """CREATE TABLE IF NOT EXISTS queue_metadata (
        queue TEXT PRIMARY KEY REFERENCES queues (name),
        metadata TEXT NOT NULL
    ) WITHOUT ROWID""",
)

_MESSAGE_COLUMNS = (
    "id, pop_receipt, dequeue_count, inserted_on, expires_on, next_visible_on, content"
)

_SELECTED_COLUMNS = _MESSAGE_COLUMNS.replace("content", "CAST(content AS BLOB)")
"""Content is read as bytes and decoded here: a row written around the API with bytes that are
not UTF-8 would otherwise make sqlite3 fail every get of its queue."""

log = structlog.get_logger(__name__)

_UNEXPIRED = "(expires_on IS NULL OR expires_on > :now)"


class SqliteQueueStorage:
    """Queues in a SQLite file shared safely by the processes and threads of one machine."""

    def __init__(
        self, path: str | Path, *, clock: Clock = SYSTEM_CLOCK, busy_timeout_s: float = 5.0
    ) -> None:
        self._path = Path(path)
        _prepare_private_files(self._path)
        self._clock = clock
        self._lock = threading.Lock()
        with _translate_errors():
            # Autocommit mode (isolation_level=None): transactions are begun explicitly below.
            # check_same_thread=False: the lock, not the thread, guards the shared connection.
            self._db = sqlite3.connect(
                self._path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        try:
            with _translate_errors():
                self._db.execute("PRAGMA journal_mode=WAL")
            with self._transaction() as db:
                for statement in _SCHEMA:
                    db.execute(statement)
        except BaseException:
            self._db.close()
            raise

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
                f"SELECT {_SELECTED_COLUMNS} FROM messages"
                " WHERE queue = :queue AND next_visible_on <= :now ORDER BY seq LIMIT :limit",
                params,
            ).fetchall()
            hidden_until = now + visibility_timeout_s
            taken = [_taken(_decoded(row, queue_name), hidden_until) for row in rows]
            db.executemany(
                "UPDATE messages SET pop_receipt = ?, dequeue_count = ?, next_visible_on = ?"
                " WHERE id = ?",
                [(m.pop_receipt, m.dequeue_count, hidden_until, m.id) for m in taken],
            )
        return taken

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        with self._transaction() as db:
            deleted = db.execute(
                f"DELETE FROM messages WHERE queue = :queue AND id = :id"
                f" AND pop_receipt = :pop_receipt AND {_UNEXPIRED}",
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
            row = _to_row(message)
            db.execute(
                f"INSERT INTO messages (queue, {_MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (queue_name, *row),
            )
        # Read back through the row, so put and a later get report identical (float) timestamps.
        return _to_message(row)

    def update_visibility(
        self, queue_name: str, message_id: str, pop_receipt: str, visibility_timeout_s: int
    ) -> str:
        check_update_arguments(visibility_timeout_s)
        new_receipt = new_pop_receipt()
        with self._transaction() as db:
            now = self._now()
            row = db.execute(
                "SELECT pop_receipt FROM messages"
                f" WHERE queue = :queue AND id = :id AND {_UNEXPIRED}",
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
                "UPDATE messages SET pop_receipt = ?, next_visible_on = ? WHERE id = ?",
                (new_receipt, now + visibility_timeout_s, message_id),
            )
        return new_receipt

    def approximate_message_count(self, queue_name: str) -> int:
        with self._lock, _translate_errors():
            _require_queue(self._db, queue_name)
            row = self._db.execute(
                f"SELECT count(*) FROM messages WHERE queue = :queue AND {_UNEXPIRED}",
                {"queue": queue_name, "now": self._now()},
            ).fetchone()
        return int(row[0])

    def peek_messages(self, queue_name: str, *, max_messages: int) -> list[QueueMessage]:
        check_max_messages(max_messages)
        with self._lock, _translate_errors():
            _require_queue(self._db, queue_name)
            rows = self._db.execute(
                f"SELECT {_SELECTED_COLUMNS} FROM messages WHERE queue = :queue"
                f" AND next_visible_on <= :now AND {_UNEXPIRED} ORDER BY seq LIMIT :limit",
                {"queue": queue_name, "now": self._now(), "limit": max_messages},
            ).fetchall()
        return [peeked(_to_message(_decoded(row, queue_name))) for row in rows]

    def get_queue_metadata(self, queue_name: str) -> dict[str, str]:
        with self._lock, _translate_errors():
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
        with self._lock, _translate_errors():
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
        with self._lock, _translate_errors():
            yield self._db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the write lock from its first statement."""
        with self._lock, _translate_errors():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                # SQLite may already have rolled back (e.g. after an I/O error).
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _now(self) -> float:
        return self._clock.now().timestamp()

    def __repr__(self) -> str:
        return f"SqliteQueueStorage(path={str(self._path)!r})"


@contextmanager
def _translate_errors() -> Iterator[None]:
    """The one boundary where sqlite3's exceptions become cloudqueue's."""
    try:
        yield
    except sqlite3.Error as error:
        # Only errors raised by SQLite itself carry a code (not, e.g., use after close). Extended
        # codes (e.g. SQLITE_BUSY_SNAPSHOT) keep the primary code in their low byte.
        code: int = getattr(error, "sqlite_errorcode", 0) & 0xFF
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise TransientStorageError("queue database is locked; retry later") from error
        raise StorageError(f"queue database error: {error}") from error


def _prepare_private_files(path: Path) -> None:
    """The folder (0700 when created; the state folder tightened) and the database file (0600)
    before SQLite opens it: SQLite gives the -wal and -shm files the database file's mode."""
    try:
        private_folder(path.parent, ours=path.parent.name == STATE_FOLDER_NAME)
        private_file(path)
        for suffix in ("-wal", "-shm"):
            tighten_if_present(path.with_name(path.name + suffix))
    except OSError as error:
        raise StorageError(f"cannot prepare the queue database {path}: {error.strerror}") from None


def _require_queue(db: sqlite3.Connection, queue_name: str) -> None:
    if db.execute("SELECT 1 FROM queues WHERE name = ?", (queue_name,)).fetchone() is None:
        raise queue_not_found(queue_name)


_Row = tuple[str, str, int, float, float | None, float, str]
_StoredRow = tuple[str, str, int, float, float | None, float, bytes]


def _to_row(message: QueueMessage) -> _Row:
    expires_on = message.expires_on.timestamp() if message.expires_on else None
    return (
        message.id,
        message.pop_receipt,
        message.dequeue_count,
        message.inserted_on.timestamp(),
        expires_on,
        message.next_visible_on.timestamp(),
        message.content,
    )


def _to_message(row: _Row) -> QueueMessage:
    message_id, pop_receipt, dequeue_count, inserted_on, expires_on, next_visible_on, content = row
    return QueueMessage(
        id=message_id,
        pop_receipt=pop_receipt,
        dequeue_count=dequeue_count,
        inserted_on=_to_datetime(inserted_on),
        expires_on=None if expires_on is None else _to_datetime(expires_on),
        next_visible_on=_to_datetime(next_visible_on),
        content=content,
    )


def _decoded(row: _StoredRow, queue_name: str) -> _Row:
    """The row with its content as text: UTF-8, or -- written around the API -- with each invalid
    byte replaced by U+FFFD (a base64 or JSON codec then finds it undecodable and poisons it)."""
    content = row[6]
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        text = content.decode("utf-8", errors="replace")
        log.warning(
            "message_not_utf8", queue=queue_name, message_id=row[0], byte_offset=error.start
        )
    return (*row[:6], text)


def _taken(row: _Row, hidden_until: float) -> QueueMessage:
    """The message in ``row`` as a get hands it out: new receipt, one more dequeue, hidden."""
    message_id, _, dequeue_count, inserted_on, expires_on, _, content = row
    return _to_message(
        (
            message_id,
            new_pop_receipt(),
            dequeue_count + 1,
            inserted_on,
            expires_on,
            hidden_until,
            content,
        )
    )


def _to_datetime(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)
