"""Moving a message that cannot be handled to ``<queue>-poison``, with the reason.

The copy is written first and the original deleted second, so a crash between the two leaves a
duplicate in the poison queue rather than a lost message. The poison message is plain JSON (not
base64) so an operator can read it with any tool; it carries the original content verbatim.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from datetime import datetime

import structlog

from cloudqueue.listener.errors import MessageTooLargeError, QueueNotFoundError, StorageError
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.poison.record import PoisonRecord
from cloudqueue.listener.stores.partitioned import split_message_id
from cloudqueue.listener.stores.storage import NEVER_EXPIRES, QueueMessage, QueueStorage

log = structlog.get_logger(__name__)


def _worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _put_record(
    storage: QueueStorage, target: str, record: PoisonRecord, *, create_queue: bool
) -> None:
    try:
        _put(storage, target, record)
    except QueueNotFoundError:
        if not create_queue:
            raise
        # Deleted while the worker runs: a message must not loop for ever for want of it.
        storage.create_queue(target)
        log.warning("poison_queue_recreated", poison_queue=target)
        _put(storage, target, record)


def _put(storage: QueueStorage, target: str, record: PoisonRecord) -> None:
    try:
        storage.put_message(target, record.to_json(), time_to_live_s=NEVER_EXPIRES)
    except MessageTooLargeError:
        # Wrapping pushed a near-limit message over 64 KiB: keep the content intact, unwrapped,
        # and let the log event carry the reason rather than lose the message.
        storage.put_message(target, record.content, time_to_live_s=NEVER_EXPIRES)


def poison_record(
    queue_name: str, message: QueueMessage, *, reason: str, error: str, now: datetime
) -> PoisonRecord:
    """The record a poisoned message leaves in ``<queue>-poison`` (its first error: this one)."""
    return PoisonRecord(
        queue=queue_name,
        original_id=message.id,
        dequeue_count=message.dequeue_count,
        inserted_on=message.inserted_on.isoformat(),
        poisoned_on=now.isoformat(),
        reason=reason,
        error=error,
        first_error=error,
        worker=_worker_identity(),
        content=message.content,
        partition=split_message_id(message.id)[1],
    )


def poison_message(
    storage: QueueStorage,
    queue_name: str,
    message: QueueMessage,
    *,
    reason: str,
    error: str,
    now: datetime,
    first_error: str | None = None,
    pop_receipt: str | None = None,
    create_queue: bool = False,
) -> bool:
    """Copy the message to the poison queue, then delete it; True when this call deleted it.

    Raises StorageError when the copy could not be written: the original then stays in its queue.
    ``create_queue`` re-creates a missing poison queue first. ``pop_receipt`` is the newest
    receipt when visibility was renewed since the get.
    """
    record = poison_record(queue_name, message, reason=reason, error=error, now=now)
    if first_error:
        record = replace(record, first_error=first_error)
    target = poison_queue_name(queue_name)
    _put_record(storage, target, record, create_queue=create_queue)
    log.warning(
        "message_poisoned",
        queue=queue_name,
        poison_queue=target,
        message_id=message.id,
        dequeue_count=message.dequeue_count,
        reason=reason,
        error=error,
    )
    try:
        return storage.delete_message(queue_name, message.id, pop_receipt or message.pop_receipt)
    except StorageError as failure:
        # The copy is made: the original comes back and is poisoned again (a duplicate record).
        log.warning("poison_delete_failed", queue=queue_name, error=str(failure))
        return False


__all__ = ["poison_message", "poison_record"]
