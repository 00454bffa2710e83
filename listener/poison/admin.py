"""Moving a message that cannot be handled to ``<queue>-poison``, with the reason.

The copy is written first and the original deleted second, so a crash between the two leaves a
duplicate in the poison queue rather than a lost message. The poison message is plain JSON (not
base64) so an operator can read it with any tool; it carries the original content verbatim.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import structlog

from listener.errors import (
    MessageTooLargeError,
    QueueNotFoundError,
    StorageError,
    UnreadableRecordError,
)
from listener.poison.queue import (
    POISON_SUFFIX,
    SCAN_VISIBILITY_S,
    browse_poisoned,
    find_poisoned,
    poison_queue_name,
    release,
    take_pages,
    take_poisoned,
)
from listener.poison.record import PoisonRecord, parse_record, read_record
from listener.stores.partition_names import partition_of_queue
from listener.stores.partitioned import split_message_id
from listener.stores.storage import MAX_BATCH_SIZE, NEVER_EXPIRES, QueueMessage, QueueStorage
from listener.wire.payload import without_attempts

PoisonReason = Literal[
    "undecodable",
    "over_limit",
    "payload_missing",
    "payload_foreign",
    "permanent_failure",
    "max_dequeue_count_exceeded",
]
"""Why a message was given up on: the ``reason`` of its poison record."""

POISON_REASONS: dict[PoisonReason, str] = {
    "undecodable": "the text cannot become an item of the worker's type (bad base64 or JSON, "
    "an item the model rejects, an empty message): poisoned on its first delivery",
    "over_limit": "the message is over a decoding limit (items, inflated bytes, stored payload "
    "bytes or JSON depth; the error names the limit and its [decoding] setting): poisoned on its "
    "first delivery, before its items are built",
    "payload_missing": "the message refers to a stored payload (a large item's blob) that is "
    "gone: deleted, expired or never written",
    "payload_foreign": "the message refers to a stored payload written for another queue: "
    "poisoned on its first delivery, and the payload is left alone for its own message",
    "permanent_failure": "a handler raised PermanentFailure: retrying is pointless",
    "max_dequeue_count_exceeded": "delivered poison.max_dequeue_count times without success: "
    "the handler kept raising, or workers crashed on it",
}
"""Every poison reason and what it means (the reference pages are generated from this)."""

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
    record = PoisonRecord(
        queue=queue_name,
        original_id=message.id,
        dequeue_count=message.dequeue_count,
        inserted_on=message.inserted_on.isoformat(),
        poisoned_on=now.isoformat(),
        reason=reason,
        error=error,
        first_error=first_error or error,
        worker=_worker_identity(),
        content=message.content,
        partition=split_message_id(message.id)[1],
    )
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


# -- Requeuing ----------------------------------------------------------------------------------


@dataclass
class Requeued:
    """What a requeue did: how many went back, and the poison ids of those it left (unreadable)."""

    moved: int = 0
    skipped: list[str] = field(default_factory=list)


def requeue_poisoned(storage: QueueStorage, queue_name: str, *, limit: int | None = None) -> int:
    """Move poisoned messages back to their queue (see ``requeue_all``); return how many."""
    return requeue_all(storage, queue_name, limit=limit).moved


def requeue_all(storage: QueueStorage, queue_name: str, *, limit: int | None = None) -> Requeued:
    """Move poisoned messages back to their queue with their original content.

    Each is put back first and deleted from the poison queue second, so a failure in between
    leaves a duplicate rather than a loss. A message that is not a record (a near-64 KiB message
    kept unwrapped) is requeued as it is; one that claims to be a record but is not (forged or
    damaged) is skipped and stays in the poison queue. Whatever is taken and not moved -- skipped,
    over the limit, or left by a storage error, which is raised -- is made visible again at once.
    """
    source = poison_queue_name(queue_name)
    done = Requeued()
    taken: list[QueueMessage] = []
    moved: set[str] = set()

    def wanted() -> int:
        return MAX_BATCH_SIZE if limit is None else limit - len(moved)

    try:
        for page in take_pages(storage, source, wanted=wanted):
            taken.extend(page)
            for message in page[: wanted()]:
                if _requeue(storage, queue_name, message):
                    moved.add(message.id)
                else:
                    done.skipped.append(message.id)
    finally:
        release(storage, source, [message for message in taken if message.id not in moved])
    done.moved = len(moved)
    log.info("poison_requeued", queue=queue_name, count=done.moved, skipped=len(done.skipped))
    return done


def _requeue(storage: QueueStorage, queue_name: str, message: QueueMessage) -> bool:
    """Put one poison message's original back and delete it; False (and a log event) when it
    claims to be a record and is not one. Storage errors are raised."""
    try:
        home, content = _home(queue_name, message.content), _original_content(message.content)
    except UnreadableRecordError as unreadable:
        log.warning("poison_requeue_skipped", poison_id=message.id, problem=unreadable.problem)
        return False
    storage.put_message(home, content)
    storage.delete_message(poison_queue_name(queue_name), message.id, message.pop_receipt)
    return True


def _home(queue_name: str, poison_text: str) -> str:
    """Where a poison message goes back to: its own partition, or the queue itself."""
    record = _record_or_original(poison_text)
    if record is None or record.partition is None:
        return queue_name
    owner = partition_of_queue(record.partition)
    # Only a partition of this very queue: a record must not steer a requeue elsewhere.
    return record.partition if owner is not None and owner[0] == queue_name else queue_name


def _original_content(poison_text: str) -> str:
    """The content to requeue: the original's, its earlier attempts forgotten (a fresh start)."""
    record = _record_or_original(poison_text)
    content = poison_text if record is None else record.content
    try:
        return without_attempts(content)
    except RecursionError:  # JSON too deep to rewrite: it goes back as it came
        return content


def _record_or_original(poison_text: str) -> PoisonRecord | None:
    """The record; None when the text is an original kept unwrapped; raises UnreadableRecordError
    when it claims to be a record and is not one."""
    try:
        return parse_record(poison_text)
    except UnreadableRecordError as unreadable:
        if unreadable.claims_record:
            raise
        return None


def requeue_poisoned_by_id(storage: QueueStorage, queue_name: str, wanted_id: str) -> bool:
    """Move the poison message for ``wanted_id`` (in full) back to its queue, as ``requeue_all``.

    False when there is none. Raises UnreadableRecordError when it claims to be a record and is
    not one, and StorageError when the put fails; either way it is made visible again at once.
    """
    source = poison_queue_name(queue_name)
    message = take_poisoned(storage, queue_name, wanted_id)
    if message is None:
        return False
    try:
        home, content = _home(queue_name, message.content), _original_content(message.content)
        storage.put_message(home, content)
    except (StorageError, UnreadableRecordError):
        release(storage, source, [message])
        raise
    storage.delete_message(source, message.id, message.pop_receipt)
    log.info("poison_requeued", queue=queue_name, count=1, wanted_id=wanted_id)
    return True


__all__ = [
    "POISON_SUFFIX",
    "SCAN_VISIBILITY_S",
    "PoisonRecord",
    "Requeued",
    "browse_poisoned",
    "find_poisoned",
    "poison_message",
    "poison_queue_name",
    "read_record",
    "requeue_all",
    "requeue_poisoned",
    "requeue_poisoned_by_id",
    "take_poisoned",
]
