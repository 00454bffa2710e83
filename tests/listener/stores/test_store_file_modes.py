"""The embedded store's files are private to their owner, whatever the umask."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener.stores.payload_store import FolderPayloadStore, new_payload_name
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.workers.host.live_state import LiveStatePublisher


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """A permissive umask: the modes must not depend on it."""
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def use_store(state: Path) -> dict[str, int]:
    """Write a message (the WAL and shared-memory files appear) and a payload; every file's and
    folder's mode while the store is open (closing it removes the WAL)."""
    with closing(SqliteQueueStorage(state / "queues.db")) as store:
        store.create_queue("invoices")
        store.put_message("invoices", "x")
        FolderPayloadStore(state / "payloads").put(new_payload_name("invoices"), b"big")
        return {str(path.relative_to(state)): mode(path) for path in state.rglob("*")}


def test_a_new_state_folder_and_its_files_are_private(tmp_path: Path, umask: int) -> None:
    """.cloudqueue/ and its folders 0700; queues.db, -wal, -shm and payload files 0600."""
    state = tmp_path / ".cloudqueue"
    modes = use_store(state)
    assert mode(state) == 0o700
    assert {name: modes[name] for name in ("payloads", "payloads/invoices")} == {
        "payloads": 0o700,
        "payloads/invoices": 0o700,
    }
    files = {name: found for name, found in modes.items() if not name.startswith("payloads")}
    assert files == {"queues.db": 0o600, "queues.db-wal": 0o600, "queues.db-shm": 0o600}
    payloads = [name for name in modes if name.startswith("payloads/invoices/")]
    assert len(payloads) == 1
    assert modes[payloads[0]] == 0o600


def test_a_looser_existing_state_folder_and_database_are_tightened_with_a_warning(
    tmp_path: Path, umask: int
) -> None:
    """What an older version left (0755 folder, 0644 files) is made private, and said so."""
    state = tmp_path / ".cloudqueue"
    (state / "payloads").mkdir(mode=0o755, parents=True)
    for folder in (state, state / "payloads"):
        folder.chmod(0o755)
    with closing(sqlite3.connect(state / "queues.db")) as db:
        db.execute("CREATE TABLE t (x)")
    (state / "queues.db").chmod(0o644)
    with capture_logs() as logs:
        use_store(state)
    assert [mode(state), mode(state / "payloads")] == [0o700, 0o700]
    assert mode(state / "queues.db") == 0o600
    tightened = {(log["path"], log["mode_was"]) for log in logs if log["event"] == "made_private"}
    assert tightened == {
        (str(state), "0o755"),
        (str(state / "payloads"), "0o755"),
        (str(state / "queues.db"), "0o644"),
    }


def test_a_folder_the_user_chose_keeps_its_mode_but_the_files_in_it_are_private(
    tmp_path: Path, umask: int
) -> None:
    """sqlite:///data/q.db in an existing data/ (or /tmp): the folder is the user's to set."""
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)
    with closing(SqliteQueueStorage(data / "q.db")):
        pass
    assert (mode(data), mode(data / "q.db")) == (0o755, 0o600)


def test_the_live_state_folder_is_created_private(tmp_path: Path, umask: int) -> None:
    """.cloudqueue/run, where running workers publish their state, is 0700 like its parent."""
    publisher = LiveStatePublisher(tmp_path / ".cloudqueue" / "run", worker="app:W")
    publisher.publish([], transactions=None)
    assert mode(tmp_path / ".cloudqueue") == 0o700
    assert mode(tmp_path / ".cloudqueue" / "run") == 0o700
