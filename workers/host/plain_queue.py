"""Messages on a plain queue beside a partitioned one of the same name: warned about, moved.

A producer that does not know a queue is partitioned (an old ``cloudqueue enqueue``, another
SDK, an Azure Functions binding) puts on ``orders`` while the workers read ``orders-p0`` ...:
those messages wait there unread. The watch counts that plain queue every ``interval_s`` (one
Get Queue Properties on account 0: 60 transactions an hour at the default minute) and logs a
warning with the count each time it finds some, until they are moved across with
``cloudqueue queues merge-plain QUEUE`` (``merge_plain_queue``).
"""

from __future__ import annotations

from datetime import datetime

import structlog

from cloudqueue.listener.clock import EVENT_SLEEPER, Sleeper
from cloudqueue.listener.errors import ConfigurationError, QueueNotFoundError, StorageError
from cloudqueue.listener.periodic import PeriodicThread
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import (
    MAX_BATCH_SIZE,
    NEVER_EXPIRES,
    QueueMessage,
    QueueStorage,
)
from cloudqueue.workers.host.partitioning import plain_queue_depth

CHECK_INTERVAL_S = 60.0
"""How often a partitioned worker counts the plain queue beside its partitions."""

log = structlog.get_logger(__name__)


class PlainQueueWatch(PeriodicThread):
    """Counts the plain queue ``queue_name`` beside its partitions in ``view``, on a thread: at
    start (messages stranded while no worker ran are the likeliest), then every ``interval_s``."""

    def __init__(
        self,
        view: QueueStorage,
        queue_name: str,
        *,
        interval_s: float = CHECK_INTERVAL_S,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        super().__init__(
            f"cloudqueue:{queue_name}:plain-queue-watch",
            interval_s=interval_s,
            sleeper=sleeper,
            tick_at_start=True,
        )
        self.view = view
        self.queue_name = queue_name
        self.last_count: int | None = None

    def tick(self) -> bool:
        self.check()
        return True

    def check(self) -> int | None:
        """One count; a warning while messages wait there, one info line once they are gone."""
        try:
            count = plain_queue_depth(self.view, self.queue_name)
        except StorageError as failure:
            log.warning("plain_queue_check_failed", queue=self.queue_name, error=str(failure))
            return None
        if count:
            log.warning(
                "plain_queue_beside_partitions",
                queue=self.queue_name,
                messages=count,
                reason="no worker reads the plain queue of a partitioned one",
                fix=f"cloudqueue queues merge-plain {self.queue_name}",
            )
        elif self.last_count:
            log.info("plain_queue_beside_partitions_emptied", queue=self.queue_name)
        self.last_count = count
        return count


MOVE_VISIBILITY_S = 60
"""How long a message being moved stays hidden on the plain queue: if the move stops between
its put and its delete, it reappears there (a duplicate on the partitions, never a loss)."""


def merge_plain_queue(view: QueueStorage, queue_name: str, *, now: datetime) -> int:
    """Move every visible message of the plain queue ``queue_name`` onto its partitions in
    ``view`` (round-robin, content and remaining time-to-live kept); return how many moved.

    Each is put on a partition first and deleted from the plain queue second. The plain queue
    itself stays (deleting it could lose a message put meanwhile). ConfigurationError when the
    view reads the plain queue itself (nothing to merge).
    """
    if plain_queue_depth(view, queue_name) is None or not isinstance(view, PartitionedQueueStorage):
        raise ConfigurationError(
            f"queue {queue_name} is not partitioned beside a plain queue of that name: its "
            "workers read the plain queue itself, so there is nothing to merge"
        )
    plain = view.accounts[0]
    moved = 0
    seen: set[str] = set()
    while fresh := _unseen_batch(plain, queue_name, seen):
        for message in fresh:
            view.put_message(queue_name, message.content, time_to_live_s=_left_s(message, now))
            plain.delete_message(queue_name, message.id, message.pop_receipt)
            moved += 1
    log.info("plain_queue_merged", queue=queue_name, moved=moved)
    return moved


def _unseen_batch(plain: QueueStorage, queue_name: str, seen: set[str]) -> list[QueueMessage]:
    """The next visible messages not taken before (one that comes round again was not deleted:
    stop rather than move it twice); [] when none is left or there is no plain queue."""
    try:
        batch = plain.get_messages(
            queue_name, max_messages=MAX_BATCH_SIZE, visibility_timeout_s=MOVE_VISIBILITY_S
        )
    except QueueNotFoundError:
        return []
    fresh = [message for message in batch if message.id not in seen]
    seen.update(message.id for message in fresh)
    return fresh


def _left_s(message: QueueMessage, now: datetime) -> int:
    """The time-to-live the message has left (at least a second), or NEVER_EXPIRES."""
    if message.expires_on is None:
        return NEVER_EXPIRES
    return max(1, int((message.expires_on - now).total_seconds()))
