"""Warning about messages on a plain queue beside a partitioned one of the same name.

A producer that does not know a queue is partitioned (an old ``cloudqueue enqueue``, another
SDK, an Azure Functions binding) puts on ``orders`` while the workers read ``orders-p0`` ...:
those messages wait there unread. The watch counts that plain queue every ``interval_s`` (one
Get Queue Properties on account 0: 60 transactions an hour at the default minute) and logs a
warning with the count each time it finds some, until they are moved across with
``cloudqueue queues merge-plain QUEUE``.
"""

from __future__ import annotations

import threading

import structlog

from listener.clock import EVENT_SLEEPER, Sleeper
from listener.errors import StorageError
from listener.stores.storage import QueueStorage
from workers.partitioning import plain_queue_depth

CHECK_INTERVAL_S = 60.0
"""How often a partitioned worker counts the plain queue beside its partitions."""

log = structlog.get_logger(__name__)


class PlainQueueWatch:
    """Counts the plain queue ``queue_name`` beside its partitions in ``view``, on a thread."""

    def __init__(
        self,
        view: QueueStorage,
        queue_name: str,
        *,
        interval_s: float = CHECK_INTERVAL_S,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        self.view = view
        self.queue_name = queue_name
        self.interval_s = interval_s
        self.sleeper = sleeper
        self.last_count: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"cloudqueue:{queue_name}:plain-queue-watch", daemon=True
        )

    def start(self) -> PlainQueueWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _run(self) -> None:
        self.check()  # at start too: messages stranded while no worker ran are the likeliest
        while not self.sleeper.wait(self._stop, self.interval_s):
            self.check()

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
