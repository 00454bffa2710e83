"""Where payloads too large for a queue message live: the ``PayloadStore`` protocol.

A payload is stored under a name; the queue carries only a small envelope naming it (see
``cloudqueue.listener.wire.payload``). Three implementations: Azure Blob Storage
(``cloudqueue.listener.stores.azure_payloads``, for the Azure queue backend), a local folder (for
the embedded SQLite store) and memory (for the in-memory store and tests).
``cloudqueue.listener.stores.connection.open_payload_store`` picks the one that matches a connection
string.

Lifetime: the publisher writes the payload before it puts the message; once the message is
handled and deleted, the listener overwrites the payload with an empty *tombstone* (never for a
poisoned message: the poison record still refers to it, so a requeue works). Two messages refer to
one payload only if the SDK repeated a put that had in fact succeeded (a 500 after the write); the
tombstone tells the second copy that the work is done, so it is dropped rather than poisoned as
``payload_missing`` (see ``cloudqueue.listener.wire.payload``). Tombstones, and payloads of messages
that expired unread, stay behind: give the container a lifecycle rule (or clean the folder) for
anything older than the queue's time-to-live.

Ownership: a payload belongs to the queue its name starts with (``check_payload_owner``); one
container serves every queue, so a listener reads only its own queue's payloads.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from pathlib import Path
from typing import Protocol, runtime_checkable

from cloudqueue.listener.errors import ForeignPayloadError, PayloadNotFoundError, StorageError
from cloudqueue.listener.stores.file_modes import PRIVATE_FILE, private_folder
from cloudqueue.listener.stores.partition_names import PARTITION_SEPARATOR

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]/[0-9a-f]{32}")
"""Matched whole (``fullmatch``): ``$`` would also accept a name ending in a newline."""


def new_payload_name(queue_name: str) -> str:
    """A fresh, unique name for a payload published on the queue: ``<queue>/<32 hex digits>``."""
    return f"{queue_name}/{uuid.uuid4().hex}"


def validate_payload_name(name: str) -> str:
    """Return the name if it has the form cloudqueue writes; raise ValueError otherwise.

    Names arrive in queue messages, which anyone with queue access can write: a strict form keeps
    a crafted name from reaching outside the store (``../``) or touching other blobs.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"invalid payload name {name[:80]!r}: expected <queue>/<32 hex digits>")
    return name


def payload_queue(name: str) -> str:
    """The queue a payload was written for: the first part of its (validated) name."""
    return validate_payload_name(name).partition("/")[0]


def check_payload_owner(name: str, queue_name: str) -> None:
    """Raise ForeignPayloadError unless the payload was written for ``queue_name`` (or for the
    logical queue that ``queue_name`` is a partition of, or for one of its partitions).

    Queue names compare case-insensitively, as Azure resolves them.
    """
    owner, queue = payload_queue(name).lower(), queue_name.lower()
    if owner == queue or _logical(owner) == queue or owner == _logical(queue):
        return
    raise ForeignPayloadError(
        f"the message refers to stored payload {name!r}, written for queue {owner!r}, but was "
        f"read from queue {queue_name!r}: left alone for its own queue's message"
    )


def _logical(queue_name: str) -> str | None:
    """The logical queue a partition's queue belongs to (``orders-p3``: ``orders``), else None."""
    base, separator, index = queue_name.rpartition(PARTITION_SEPARATOR)
    return base if separator and index.isdigit() else None


@runtime_checkable
class PayloadStore(Protocol):
    """Named byte strings written once, read by the listener, then deleted."""

    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` under ``name``, replacing what was there; visible whole or not at all."""

    def get(self, name: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes stored under ``name``; raises PayloadNotFoundError when there are none.

        With ``max_bytes``, at most one byte more than that is read (so the caller can tell that
        the payload is larger without holding all of it)."""

    def delete(self, name: str) -> None:
        """Remove the payload; a name with nothing stored under it is not an error."""

    def close(self) -> None:
        """Release connections; the store is not used afterwards."""


class InMemoryPayloadStore:
    """Payloads in a dict, lost when the process exits (pairs with InMemoryQueueStorage)."""

    def __init__(self) -> None:
        self._payloads: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, name: str, data: bytes) -> None:
        validate_payload_name(name)
        with self._lock:
            self._payloads[name] = bytes(data)

    def get(self, name: str, *, max_bytes: int | None = None) -> bytes:
        with self._lock:
            data = self._payloads.get(name)
        if data is None:
            raise PayloadNotFoundError(f"payload {name!r} not found")
        return data if max_bytes is None else data[: max_bytes + 1]

    def delete(self, name: str) -> None:
        with self._lock:
            self._payloads.pop(name, None)

    def names(self) -> list[str]:
        """Every stored name, sorted (for tests and tooling)."""
        with self._lock:
            return sorted(self._payloads)

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return f"InMemoryPayloadStore(payloads={len(self._payloads)})"


class FolderPayloadStore:
    """Payloads as files under a folder (``<root>/<queue>/<name>``), for the embedded store."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        # Written to a temporary file and renamed, so a reader never sees half a payload and a
        # crash leaves either the old state or the new one.
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            private_folder(self.root)  # payloads/ and payloads/<queue>/ are cloudqueue's own
            private_folder(path.parent)
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
            with os.fdopen(descriptor, "wb") as file:
                os.fchmod(file.fileno(), PRIVATE_FILE)  # 0600 whatever the umask
                file.write(data)
                file.flush()
                os.fsync(file.fileno())  # durable before the message that refers to it is put
            temporary.replace(path)
        except OSError as error:
            temporary.unlink(missing_ok=True)
            raise StorageError(f"storing payload {name!r} failed: {error.strerror}") from None

    def get(self, name: str, *, max_bytes: int | None = None) -> bytes:
        try:
            with self._path(name).open("rb") as file:
                return file.read(-1 if max_bytes is None else max_bytes + 1)
        except FileNotFoundError:
            raise PayloadNotFoundError(f"payload {name!r} not found") from None
        except OSError as error:
            raise StorageError(f"reading payload {name!r} failed: {error.strerror}") from None

    def delete(self, name: str) -> None:
        try:
            self._path(name).unlink(missing_ok=True)
        except OSError as error:
            raise StorageError(f"deleting payload {name!r} failed: {error.strerror}") from None

    def names(self) -> list[str]:
        """Every stored name, sorted (for tests and tooling; temporary files excluded)."""
        if not self.root.is_dir():
            return []
        found = (path.relative_to(self.root).as_posix() for path in self.root.glob("*/*"))
        return sorted(name for name in found if _NAME.fullmatch(name))

    def close(self) -> None:
        """Nothing to release."""

    def _path(self, name: str) -> Path:
        return self.root / validate_payload_name(name)

    def __repr__(self) -> str:
        return f"FolderPayloadStore({str(self.root)!r})"


__all__ = [
    "FolderPayloadStore",
    "InMemoryPayloadStore",
    "PayloadStore",
    "check_payload_owner",
    "new_payload_name",
    "payload_queue",
    "validate_payload_name",
]
