"""Getting a batch for the hand-off: how many to ask for, the fetch hooks, a vanished queue."""

from __future__ import annotations

import structlog

from cloudqueue.listener.consumer.handoff import fetch_size
from cloudqueue.listener.consumer.pool import DequeuePool
from cloudqueue.listener.consumer.queues import QueueCreator
from cloudqueue.listener.consumer.stack import MiddlewareStack
from cloudqueue.listener.consumer.throughput import ThroughputMeter
from cloudqueue.listener.errors import QueueNotFoundError, StorageError
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage

log = structlog.get_logger(__name__)


class Fetcher:
    """Gets one batch of a listener's queue with a visibility timeout, for every thread."""

    def __init__(
        self,
        storage: QueueStorage,
        location: CloudQueueLocation,
        *,
        batch_size: int,
        pool: DequeuePool,
        throughput: ThroughputMeter,
        stack: MiddlewareStack,
        queues: QueueCreator,
    ) -> None:
        self.storage = storage
        self.location = location
        self.batch_size = batch_size
        self.pool = pool
        self.throughput = throughput
        self.stack = stack
        self.queues = queues

    def get_batch(self) -> list[QueueMessage]:
        """The next batch (possibly empty); raises what storage raised."""
        queue, stack = self.location.queue_name, self.stack
        if stack.wants("before_fetch"):
            stack.emit("before_fetch", queue)
        timeout_s = self.location.visibility_timeout_s
        try:
            messages = self.storage.get_messages(
                queue,
                max_messages=fetch_size(
                    batch_size=self.batch_size,
                    threads=self.pool.active,
                    per_thread_rate_per_s=self.throughput.per_thread_rate_per_s,
                    visibility_timeout_s=timeout_s,
                ),
                visibility_timeout_s=timeout_s,
            )
        except QueueNotFoundError:
            # Someone deleted the queue (or an emulator restarted empty): recreate it next time.
            self.queues.forget()
            self.queues.ensure()
            raise
        if stack.wants("after_fetch"):
            stack.emit("after_fetch", queue, messages)
        return messages

    def log_failure(self, failure: Exception, error_count: int) -> None:
        """A failed get: a warning for a storage error, the traceback for anything else."""
        queue = self.location.queue_name
        if isinstance(failure, StorageError):
            log.warning(
                "dequeue_failed",
                queue=queue,
                error=str(failure),
                kind=type(failure).__name__,
                consecutive_errors=error_count,
            )
        else:
            log.error(
                "dequeue_failed_unexpectedly",
                queue=queue,
                consecutive_errors=error_count,
                exc_info=failure,
            )


__all__ = ["Fetcher"]
