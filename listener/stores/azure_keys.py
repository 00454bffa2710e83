"""The key ledger on Azure: a blob per queue and key, changed by conditional writes (ETags).

Each record is the metadata of an empty blob ``<queue>/<kind>/<sha256 of the key>`` in the
``cloudqueue-keys`` container of the queues' account (azure-storage-blob, which the payload store
already needs: no Table service, no extra). A change reads the blob's properties (its metadata and
ETag), decides, and writes only if nobody wrote in between: a new blob with ``If-None-Match: *``,
new metadata or a delete with ``If-Match: <etag>``. A write that finds the blob changed (409 or
412) is decided again on what is there now, so two processes never both decide on the same state.

Costs: a read and a write per change; the ETag of a blob this process wrote last is remembered, so
the next change of it (a handler's completion after its start) writes first and reads only when
that fails. Times are this machine's UTC clock. Expired records are removed in a background sweep
(one listing of the container) at most every ``SWEEP_INTERVAL_S`` per process; an Azure lifecycle
rule on the container does the same for free.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import structlog
from azure.core import MatchConditions
from azure.core.credentials import TokenCredential
from azure.core.exceptions import (
    AzureError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.blob import BlobClient, ContainerClient

from cloudqueue.listener import errors
from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.stores.azure_errors import translate_error
from cloudqueue.listener.stores.azure_payloads import (
    container_from_account_url,
    container_from_connection_string,
)
from cloudqueue.listener.stores.key_records import (
    EMPTY,
    SWEEP_INTERVAL_S,
    Decide,
    KeyRecord,
    R,
    RecordKind,
)

__all__ = ["KEYS_CONTAINER", "AzureKeyLedger"]

log = structlog.get_logger(__name__)

KEYS_CONTAINER = "cloudqueue-keys"
MAX_TRIES = 20
"""Conditional writes lost to other writers before a change gives up (TransientStorageError)."""
MAX_REMEMBERED = 10_000

_Version = tuple[str | None, KeyRecord]
"""A blob's ETag (None: no blob) and the record it holds."""


class _ConflictError(Exception):
    """Someone wrote the blob since it was read: decide again."""


class AzureKeyLedger:
    """Key records as blob metadata, each change a conditional write."""

    def __init__(self, container: ContainerClient, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._container = container
        self._clock = clock
        self._known: dict[str, _Version] = {}
        self._lock = threading.Lock()
        self._next_sweep = clock.monotonic() + SWEEP_INTERVAL_S
        self._sweeping: threading.Thread | None = None
        self._calls: Counter[str] = Counter()
        """Blob calls per queue: billed transactions, for the live cost meter."""

    @classmethod
    def from_connection_string(cls, connection_string: str, **overrides: Any) -> AzureKeyLedger:
        return cls(container_from_connection_string(connection_string, KEYS_CONTAINER, **overrides))

    @classmethod
    def from_account_url(cls, account_url: str, credential: TokenCredential) -> AzureKeyLedger:
        """Connect to a blob service URL with a token credential (Microsoft Entra ID)."""
        return cls(container_from_account_url(account_url, KEYS_CONTAINER, credential))

    def change(self, queue: str, kind: RecordKind, key: str, decide: Decide[R]) -> R:
        blob = self._container.get_blob_client(blob_name(queue, kind, key))
        with self._lock:
            known = self._known.pop(blob.blob_name, None)
        for _ in range(MAX_TRIES):
            etag, stored = known if known is not None else self._read(blob)
            now = self._clock.now()
            new, answer = decide(stored.live(now), now)
            if new is None and known is not None:
                known = None  # decided on what this process last wrote: read what is there
                continue
            if new is None:
                return answer
            try:
                self._remember(blob.blob_name, self._write(blob, etag, new))
            except _ConflictError:
                known = None
                continue
            self._sweep_if_due()
            return answer
        raise errors.TransientStorageError(
            f"key record of queue {queue!r} changed by others {MAX_TRIES} times in a row"
        )

    def record(self, queue: str, kind: RecordKind, key: str) -> KeyRecord:
        _, stored = self._read(self._container.get_blob_client(blob_name(queue, kind, key)))
        return stored.live(self._clock.now())

    def counts_by_queue(self) -> dict[str, int]:
        with self._lock:
            return dict(self._calls)

    def close(self) -> None:
        self._container.close()

    def sweep(self) -> int:
        """Delete the records whose every time has passed; how many were deleted."""
        now, deleted = self._clock.now(), 0
        try:
            # One list call every SWEEP_INTERVAL_S for all queues: not counted to any of them.
            with _translated("list"):
                listed = list(self._container.list_blobs(include=["metadata"]))
        except errors.QueueNotFoundError:
            return 0  # no container yet
        for properties in listed:
            expires = KeyRecord.from_fields(dict(properties.metadata or {})).expires()
            if expires is not None and expires > now:
                continue
            blob = self._container.get_blob_client(properties.name)
            try:
                self._write(blob, properties.etag, EMPTY)  # unless rewritten meanwhile
                deleted += 1
            except (_ConflictError, errors.StorageError):
                continue
        log.info("key_records_swept", deleted=deleted, container=KEYS_CONTAINER)
        return deleted

    def _count(self, blob: BlobClient, calls: int = 1) -> None:
        queue = blob.blob_name.partition("/")[0]
        with self._lock:
            self._calls[queue] += calls

    def _read(self, blob: BlobClient) -> _Version:
        self._count(blob)
        try:
            with _translated("read"):
                properties = blob.get_blob_properties()
        except errors.QueueNotFoundError:
            return None, EMPTY
        return properties.etag, KeyRecord.from_fields(dict(properties.metadata or {}))

    def _write(self, blob: BlobClient, etag: str | None, record: KeyRecord) -> _Version | None:
        """Write ``record`` if the blob is still at ``etag``; its new version (None: no blob)."""
        fields = record.to_fields()
        if record.expires() is not None or etag is not None:
            self._count(blob)
        try:
            with _translated("write"):
                if record.expires() is None:
                    if etag is not None:
                        blob.delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified)
                    return None
                if etag is None:
                    written = self._create(blob, fields)
                else:
                    written = blob.set_blob_metadata(
                        fields, etag=etag, match_condition=MatchConditions.IfNotModified
                    )
        except errors.QueueNotFoundError:
            raise _ConflictError from None  # deleted meanwhile (a sweep): decide again
        return str(written["etag"]), record

    def _create(self, blob: BlobClient, fields: dict[str, str]) -> dict[str, Any]:
        try:
            return blob.upload_blob(b"", metadata=fields, overwrite=False)
        except ResourceNotFoundError:  # no container yet
            self._count(blob, calls=2)
            with suppress(ResourceExistsError):
                self._container.create_container()
            return blob.upload_blob(b"", metadata=fields, overwrite=False)

    def _remember(self, name: str, version: _Version | None) -> None:
        with self._lock:
            if version is None:
                return
            if len(self._known) >= MAX_REMEMBERED:
                self._known.clear()  # only a shortcut: forgetting costs a read
            self._known[name] = version

    def _sweep_if_due(self) -> None:
        with self._lock:
            if self._clock.monotonic() < self._next_sweep:
                return
            if self._sweeping is not None and self._sweeping.is_alive():
                return
            self._next_sweep = self._clock.monotonic() + SWEEP_INTERVAL_S
            self._sweeping = threading.Thread(
                target=self._sweep_quietly, name="cloudqueue:key-sweep", daemon=True
            )
            self._sweeping.start()

    def _sweep_quietly(self) -> None:
        try:
            self.sweep()
        except errors.StorageError as error:
            log.warning("key_records_sweep_failed", error=str(error))

    def __repr__(self) -> str:
        return f"AzureKeyLedger(container={KEYS_CONTAINER!r})"


def blob_name(queue: str, kind: RecordKind, key: str) -> str:
    """Where a key's record lives: hashed, so any key makes a valid, fixed-length name."""
    return f"{queue}/{kind}/{hashlib.sha256(key.encode('utf-8')).hexdigest()}"


@contextmanager
def _translated(operation: str) -> Iterator[None]:
    """SDK exceptions as the project's; a lost race as _ConflictError; a missing blob or container
    as QueueNotFoundError (no record)."""
    try:
        yield
    except (ResourceExistsError, ResourceModifiedError):
        raise _ConflictError from None
    except ResourceNotFoundError:
        raise errors.QueueNotFoundError("no key record") from None
    except AzureError as error:
        raise translate_error(error, operation=f"{operation} a key record", queue_name="") from None
