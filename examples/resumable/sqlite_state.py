"""The state store in an SQLite file: a version number per record, compare-and-set by UPDATE."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from examples.resumable.state import ConflictError, JobState, Versioned
from examples.shared_sqlite import open_shared


class SqliteStateStore:
    """Job states in one table; safe to share between threads and processes."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._db = open_shared(
            path,
            "CREATE TABLE IF NOT EXISTS job_state ("
            " job_id TEXT PRIMARY KEY, state TEXT NOT NULL, version INTEGER NOT NULL)",
        )

    def load(self, job_id: str) -> Versioned | None:
        with self._lock:
            row = self._db.execute(
                "SELECT state, version FROM job_state WHERE job_id = ?", (job_id,)
            ).fetchone()
        if row is None:
            return None
        return Versioned(JobState.model_validate_json(row[0]), str(row[1]))

    def create(self, job_id: str, state: JobState) -> Versioned:
        try:
            with self._lock:
                self._db.execute(
                    "INSERT INTO job_state (job_id, state, version) VALUES (?, ?, 1)",
                    (job_id, state.model_dump_json()),
                )
        except sqlite3.IntegrityError:
            raise ConflictError(f"job {job_id} already has a state") from None
        return Versioned(state, "1")

    def replace(self, job_id: str, state: JobState, version: str) -> Versioned:
        with self._lock:
            cursor = self._db.execute(
                "UPDATE job_state SET state = ?, version = version + 1 "
                "WHERE job_id = ? AND version = ?",
                (state.model_dump_json(), job_id, int(version)),
            )
        if cursor.rowcount != 1:
            raise ConflictError(f"job {job_id} changed since version {version}")
        return Versioned(state, str(int(version) + 1))

    def close(self) -> None:
        with self._lock:
            self._db.close()
