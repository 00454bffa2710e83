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
    worker: str
    content: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> PoisonRecord:
        return cls(**json.loads(text))


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
) -> bool:
    """Copy the message to the poison queue, then delete it; False if it stays in its queue."""
    record = PoisonRecord(
        queue=queue_name,
        original_id=message.id,
        dequeue_count=message.dequeue_count,
        inserted_on=message.inserted_on.isoformat(),
        poisoned_on=now.isoformat(),
        reason=reason,
        error=error,
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
    storage.delete_message(queue_name, message.id, message.pop_receipt)
    log.warning(
        "message_poisoned", queue=queue_name, poison_queue=target, reason=reason, error=error
    )
    return True
