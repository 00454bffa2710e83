"""Moving poisoned messages back to their queue, once what made them fail is mended.

Each is put back first and deleted from the poison queue second, so a failure in between leaves
a duplicate rather than a loss; a requeued message starts its count of deliveries afresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from cloudqueue.listener.errors import StorageError, UnreadableRecordError
from cloudqueue.listener.poison.queue import poison_queue_name, release, take_pages, take_poisoned
from cloudqueue.listener.poison.record import PoisonRecord, parse_record
from cloudqueue.listener.stores.partition_names import partition_of_queue
from cloudqueue.listener.stores.storage import MAX_BATCH_SIZE, QueueMessage, QueueStorage
from cloudqueue.listener.wire.envelope import without_attempts

log = structlog.get_logger(__name__)


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


__all__ = ["Requeued", "requeue_all", "requeue_poisoned", "requeue_poisoned_by_id"]
