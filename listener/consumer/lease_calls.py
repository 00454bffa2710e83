"""The storage calls that settle a leased message: each with its newest pop receipt, none racing
a renewal, and none raising: a call that fails leaves the message to reappear (at-least-once)."""

from __future__ import annotations

import structlog

from cloudqueue.listener.consumer.leases import Lease
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.payload import retire_payload

log = structlog.get_logger(__name__)


def delete(storage: QueueStorage, queue_name: str, lease: Lease) -> bool:
    """Delete the message from its queue; True only when this call deleted it."""
    deleted: list[bool] = []

    def call(pop_receipt: str) -> None:
        try:
            deleted.append(storage.delete_message(queue_name, lease.message.id, pop_receipt))
        except StorageError as failure:
            # Not deleted: it reappears and is handled again (at-least-once).
            log.warning("delete_failed", error=str(failure))

    lease.settle(call)
    return any(deleted)


def set_visibility(storage: QueueStorage, queue_name: str, lease: Lease, seconds: int) -> None:
    """Hide the message for ``seconds`` from now (0: visible at once)."""

    def call(pop_receipt: str) -> None:
        try:
            storage.update_visibility(queue_name, lease.message.id, pop_receipt, seconds)
        except StorageError as failure:
            # It reappears when its current visibility timeout ends instead.
            log.warning("visibility_update_failed", error=str(failure))

    lease.settle(call)


def retire(store: PayloadStore | None, name: str) -> None:
    """Replace the stored payload of a deleted message with a tombstone; log, never raise."""
    # Only after a delete that succeeded: a message that was not deleted (stale receipt) is
    # someone else's now, and they still need the payload. Should this fail, the payload stays,
    # and a duplicate copy, if any, is handled once more (at-least-once).
    if store is None:  # pragma: no cover - a stored payload was read through this store
        return
    try:
        retire_payload(store, name)
    except StorageError as failure:
        log.warning("payload_retire_failed", payload=name, error=str(failure))
    except Exception:
        log.exception("payload_retire_failed_unexpectedly", payload=name)


def forget(store: PayloadStore | None, name: str) -> None:
    """Remove a deleted message's stored checkpoint; log, never raise (left, it is only clutter
    for the payload store's clean-up: no other message names it)."""
    if store is None:  # pragma: no cover - the checkpoint was stored through this store
        return
    try:
        store.delete(name)
    except StorageError as failure:
        log.warning("checkpoint_payload_not_removed", payload=name, error=str(failure))


__all__ = ["delete", "forget", "retire", "set_visibility"]
