"""An SQLite file that the threads and processes of an example's workers share.

One connection per object, used under its own lock (``check_same_thread=False``); autocommit, so
each statement or explicit transaction commits on its own; WAL, so readers never block the
writer; and a generous busy timeout, so a second process waits for the lock instead of failing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

BUSY_TIMEOUT_S = 30.0


def open_shared(path: Path, schema: str) -> sqlite3.Connection:
    """Open (creating the folder and the tables of ``schema`` if needed) a shared database file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    database = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
    )
    database.execute("PRAGMA journal_mode=WAL")
    database.executescript(schema)
    return database
