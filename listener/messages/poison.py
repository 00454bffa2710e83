"""Moving a message that cannot be handled to ``<queue>-poison``, with the reason.

The copy is written first and the original deleted second, so a crash between the two leaves a
duplicate in the poison queue rather than a lost message. The poison message is plain JSON (not
base64) so an operator can read it with any tool; it carries the original content verbatim.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Literal

import structlog

from listener.errors import MessageNotFoundError, MessageTooLargeError, StorageError
from listener.messages.payload import without_attempts
from listener.stores.partition_names import partition_of_queue
from listener.stores.partitioned import split_message_id
from listener.stores.storage import MAX_BATCH_SIZE, NEVER_EXPIRES, QueueMessage, QueueStorage

POISON_SUFFIX = "-poison"

PoisonReason = Literal[
    "undecodable", "payload_missing", "permanent_failure", "max_dequeue_count_exceeded"
]
"""Why a message was given up on: the ``reason`` of its poison record."""

POISON_REASONS: dict[PoisonReason, str] = {
    "undecodable": "the text cannot become an item of the worker's type (bad base64 or JSON, "
    "an item the model rejects, an empty message): poisoned on its first delivery",
    "payload_missing": "the message refers to a stored payload (a large item's blob) that is "
    "gone: deleted, expired or never written",
    "permanent_failure": "a handler raised PermanentFailure: retrying is pointless",
    "max_dequeue_count_exceeded": "delivered poison.max_dequeue_count times without success: "
    "the handler kept raising, or workers crashed on it",
}
"""Every poison reason and what it means (the reference pages are generated from this)."""

log = structlog.get_logger(__name__)


def poison_queue_name(queue_name: str) -> str:
    """The queue that receives a queue's poison messages (named as Azure Functions names it)."""
    return f"{queue_name}{POISON_SUFFIX}"


@dataclass(frozen=True, slots=True)
class PoisonRecord:
    """What the poison queue keeps about a message that was given up on."""

    queue: str
    original_id: str
    dequeue_count: int
    inserted_on: str
    poisoned_on: str
    reason: str
    """One of ``POISON_REASONS`` (a string, so a record written by a newer version still reads)."""
    error: str
    """The error that decided it (the last one)."""
    first_error: str
    """The first error this worker saw for the message (equal to ``error`` if only one)."""
    worker: str
    content: str
    partition: str | None = None
    """The physical queue of a partitioned queue the message came from (``orders-p2``)."""

    def to_json(self) -> str:
        fields = asdict(self)
        if self.partition is None:
            del fields["partition"]  # a plain queue's record stays as it always was
        return json.dumps(fields, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> PoisonRecord:
        fields = json.loads(text)
        fields.setdefault("first_error", fields.get("error", ""))
        return cls(**fields)


def _worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _put_record(storage: QueueStorage, target: str, record: PoisonRecord) -> None:
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
) -> bool:
    """Copy the message to the poison queue, then delete it; False if it stays in its queue.

    ``pop_receipt`` is the newest receipt when visibility was renewed since the get.
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
    try:
        _put_record(storage, target, record)
    except StorageError as failure:
        # The original stays in its queue and comes back after its visibility timeout.
        log.error("poison_failed", queue=queue_name, reason=reason, error=str(failure))
        return False
    storage.delete_message(queue_name, message.id, pop_receipt or message.pop_receipt)
    log.warning(
        "message_poisoned",
        queue=queue_name,
        poison_queue=target,
        message_id=message.id,
        dequeue_count=message.dequeue_count,
        reason=reason,
        error=error,
    )
    return True


def requeue_poisoned(storage: QueueStorage, queue_name: str, *, limit: int | None = None) -> int:
    """Move poisoned messages back to their queue with their original content; return how many.

    Each is put back first and deleted from the poison queue second, so a failure in between
    leaves a duplicate rather than a loss. A record that is not JSON (a near-64 KiB message kept
    unwrapped) is requeued as it is.
    """
    moved = 0
    source = poison_queue_name(queue_name)
    while limit is None or moved < limit:
        batch = storage.get_messages(
            source, max_messages=min(32, (limit - moved) if limit else 32), visibility_timeout_s=60
        )
        if not batch:
            break
        for message in batch:
            storage.put_message(_home(queue_name, message), _original_content(message.content))
            storage.delete_message(source, message.id, message.pop_receipt)
            moved += 1
    log.info("poison_requeued", queue=queue_name, count=moved)
    return moved


def _home(queue_name: str, message: QueueMessage) -> str:
    """Where a poison message goes back to: its own partition, or the queue itself."""
    record = read_record(message.content)
    if record is None or record.partition is None:
        return queue_name
    owner = partition_of_queue(record.partition)
    # Only a partition of this very queue: a record must not steer a requeue elsewhere.
    return record.partition if owner is not None and owner[0] == queue_name else queue_name


def _original_content(poison_text: str) -> str:
    """The content to requeue: the original's, its earlier attempts forgotten (a fresh start)."""
    try:
        content = PoisonRecord.from_json(poison_text).content
    except (ValueError, TypeError, AttributeError):
        content = poison_text  # not a record: the original content itself
    return without_attempts(content)


# -- Inspecting the poison queue (the `cloudqueue poison` commands) -----------------------------
#
# A peek sees at most 32 messages. Reading further takes messages page by page, each hidden for
# SCAN_VISIBILITY_S so the next page holds new ones, and makes every one visible again at the end.

SCAN_VISIBILITY_S = 60
"""How long a scan hides each poison message it reads: longer than a scan takes, so none is read
twice, and short enough that they reappear soon if the scanning process dies."""


def read_record(poison_text: str) -> PoisonRecord | None:
    """The record a poison message carries; None when it is the original content, kept unwrapped."""
    try:
        return PoisonRecord.from_json(poison_text)
    except (ValueError, TypeError, AttributeError):
        return None


def browse_poisoned(storage: QueueStorage, queue_name: str, *, limit: int) -> list[QueueMessage]:
    """Up to ``limit`` poison messages of the queue, left in place (their pop receipts are stale).

    Up to 32 are peeked, which changes nothing; more are read by a scan, which hides them for a
    moment: a requeue or a poison-queue listener running meanwhile may miss them.
    """
    source = poison_queue_name(queue_name)
    if limit <= MAX_BATCH_SIZE:
        return storage.peek_messages(source, max_messages=limit)
    taken: list[QueueMessage] = []
    try:
        for page in _take_pages(storage, source, limit=limit):
            taken.extend(page)
    finally:
        _release(storage, source, taken)
    return list({message.id: message for message in taken}.values())


def find_poisoned(storage: QueueStorage, queue_name: str, wanted_id: str) -> QueueMessage | None:
    """The poison message for ``wanted_id``, left in place; None if there is none.

    ``wanted_id`` is the original message's id, or the poison message's own id (the only one an
    unwrapped message has). The first 32 are peeked; a scan looks further only when needed.
    """
    peeked = storage.peek_messages(poison_queue_name(queue_name), max_messages=MAX_BATCH_SIZE)
    found = next((message for message in peeked if _matches(message, wanted_id)), None)
    if found is not None or len(peeked) < MAX_BATCH_SIZE:
        return found
    taken = take_poisoned(storage, queue_name, wanted_id)
    if taken is not None:
        _release(storage, poison_queue_name(queue_name), [taken])
    return taken


def take_poisoned(
    storage: QueueStorage,
    queue_name: str,
    wanted_id: str,
    *,
    visibility_timeout_s: int = SCAN_VISIBILITY_S,
) -> QueueMessage | None:
    """The poison message for ``wanted_id`` (as ``find_poisoned``), hidden with a fresh pop
    receipt so the caller can delete it; None if there is none. The others read are released."""
    source = poison_queue_name(queue_name)
    passed: list[QueueMessage] = []
    try:
        for page in _take_pages(storage, source, visibility_timeout_s=visibility_timeout_s):
            found = next((message for message in page if _matches(message, wanted_id)), None)
            passed.extend(message for message in page if message is not found)
            if found is not None:
                return found
    finally:
        _release(storage, source, passed)
    return None


def requeue_poisoned_by_id(storage: QueueStorage, queue_name: str, wanted_id: str) -> bool:
    """Move the poison message for ``wanted_id`` back to its queue with its original content.

    False when there is none. Put back first, deleted second, as ``requeue_poisoned``; if the put
    fails the poison message is made visible again at once.
    """
    source = poison_queue_name(queue_name)
    message = take_poisoned(storage, queue_name, wanted_id)
    if message is None:
        return False
    try:
        storage.put_message(_home(queue_name, message), _original_content(message.content))
    except StorageError:
        _release(storage, source, [message])
        raise
    storage.delete_message(source, message.id, message.pop_receipt)
    log.info("poison_requeued", queue=queue_name, count=1, wanted_id=wanted_id)
    return True


def _matches(message: QueueMessage, wanted_id: str) -> bool:
    record = read_record(message.content)
    return message.id == wanted_id or (record is not None and record.original_id == wanted_id)


def _take_pages(
    storage: QueueStorage,
    source: str,
    *,
    limit: int | None = None,
    visibility_timeout_s: int = SCAN_VISIBILITY_S,
) -> Iterator[list[QueueMessage]]:
    """Pages of visible messages, each hidden as it is taken; the caller releases them.

    Ends when no visible message is left, ``limit`` are taken, or one comes round a second time
    (the scan outlasted the visibility timeout: everything has been seen).
    """
    seen: set[str] = set()
    while limit is None or len(seen) < limit:
        wanted = MAX_BATCH_SIZE if limit is None else min(MAX_BATCH_SIZE, limit - len(seen))
        page = storage.get_messages(
            source, max_messages=wanted, visibility_timeout_s=visibility_timeout_s
        )
        if not page:
            return
        repeated = any(message.id in seen for message in page)
        seen.update(message.id for message in page)
        yield page
        if repeated:
            return


def _release(storage: QueueStorage, source: str, messages: list[QueueMessage]) -> None:
    """Make taken messages visible again; one re-taken since, or gone, is no longer ours."""
    for message in messages:
        with contextlib.suppress(MessageNotFoundError):
            storage.update_visibility(source, message.id, message.pop_receipt, 0)
