"""The queue database file: private on disk, opened in WAL mode with its schema, sqlite3's errors
translated at one boundary.

``SqliteQueueStorage`` runs the queue operations on the connection ``open_database`` gives it, each
write in one ``BEGIN IMMEDIATE`` transaction (``immediate``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cloudqueue.listener.errors import StorageError, TransientStorageError
from cloudqueue.listener.stores.file_modes import (
    STATE_FOLDER_NAME,
    private_file,
    private_folder,
    tighten_if_present,
)

__all__ = ["SCHEMA", "immediate", "open_database", "translate_errors"]

SCHEMA = (
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


def open_database(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """The file at ``path`` (made private first), in WAL mode, with the schema in place."""
    _prepare_private_files(path)
    with translate_errors():
        # Autocommit mode (isolation_level=None): transactions are begun explicitly (immediate).
        # check_same_thread=False: the storage's lock, not the thread, guards the connection.
        db = sqlite3.connect(
            path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
    try:
        _use_wal(db, busy_timeout_s)
        with immediate(db):
            for statement in SCHEMA:
                db.execute(statement)
    except BaseException:
        db.close()
        raise
    return db


def _use_wal(db: sqlite3.Connection, busy_timeout_s: float) -> None:
    """Switch the file to WAL mode (it stays so), retried until ``busy_timeout_s``: SQLite answers
    a switch that meets another process's switch with SQLITE_BUSY at once, without waiting, so two
    workers started together on a new file failed one time in twelve."""
    deadline, pause_s = time.monotonic() + busy_timeout_s, 0.005
    while True:
        try:
            with translate_errors():
                db.execute("PRAGMA journal_mode=WAL")
            return
        except TransientStorageError:
            if time.monotonic() + pause_s > deadline:
                raise
            time.sleep(pause_s)  # a retry pause, not a wait for a condition anyone signals
            pause_s = min(pause_s * 2, 0.1)


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, holding the write lock from its first statement."""
    with translate_errors():
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            # SQLite may already have rolled back (e.g. after an I/O error).
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


@contextmanager
def translate_errors() -> Iterator[None]:
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
