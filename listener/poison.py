"""Moving a message that cannot be handled to ``<queue>-poison``, with the reason.

The copy is written first and the original deleted second, so a crash between the two leaves a
duplicate in the poison queue rather than a lost message. The poison message is plain JSON (not
base64) so an operator can read it with any tool; it carries the original content verbatim.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from datetime import datetime

import structlog

from listener.errors import MessageTooLargeError, StorageError
from listener.storage import NEVER_EXPIRES, QueueMessage, QueueStorage

POISON_SUFFIX = "-poison"

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
    error: str
    """The error that decided it (the last one)."""
    first_error: str
    """The first error this worker saw for the message (equal to ``error`` if only one)."""
    worker: str
    content: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

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
        "message_poisoned", queue=queue_name, poison_queue=target, reason=reason, error=error
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
            storage.put_message(queue_name, _original_content(message.content))
            storage.delete_message(source, message.id, message.pop_receipt)
            moved += 1
    log.info("poison_requeued", queue=queue_name, count=moved)
    return moved


def _original_content(poison_text: str) -> str:
    try:
        return PoisonRecord.from_json(poison_text).content
    except (ValueError, TypeError, AttributeError):
        return poison_text  # not a record: the original content itself
