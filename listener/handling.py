"""Handling one fetched message: decode, fan out, then delete, leave for retry, or poison.

Every message ends in exactly one of three places: deleted after every observer returned, left in
the queue (an observer raised, or the delete failed) to reappear after its visibility timeout, or
copied to the poison queue with the reason and then deleted.
"""

from __future__ import annotations

import contextlib
from typing import Generic, TypeVar

import structlog

from listener.clock import Clock
from listener.codec import Codec
from listener.envelope import MessageEnvelope, set_current_envelope
from listener.errors import DecodeError, StorageError
from listener.poison import poison_message
from listener.stats import ListenerCounters
from listener.storage import QueueMessage, QueueStorage
from listener.subscribers import Subscribers

T = TypeVar("T")

log = structlog.get_logger(__name__)


class MessageProcessor(Generic[T]):
    """Takes one message of one queue through decode, delivery and settlement."""

    def __init__(
        self,
        *,
        storage: QueueStorage,
        queue_name: str,
        codec: Codec[T],
        subscribers: Subscribers[T],
        counters: ListenerCounters,
        clock: Clock,
    ) -> None:
        self.storage = storage
        self.queue_name = queue_name
        self.codec = codec
        self.subscribers = subscribers
        self.counters = counters
        self.clock = clock

    def process(self, message: QueueMessage) -> None:
        """Decode, deliver to every observer, and settle the message."""
        # bind/reset rather than the bound_contextvars() context manager: a third of the cost,
        # and this runs once per message.
        tokens = structlog.contextvars.bind_contextvars(
            queue=self.queue_name, message_id=message.id, dequeue_count=message.dequeue_count
        )
        try:
            self._settle(message)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    def _settle(self, message: QueueMessage) -> None:
        try:
            item = self.codec.decode(message.content)
        except DecodeError as failure:
            self._poison(message, reason="undecodable", error=str(failure))
            return
        if self._deliver(message, item):
            self._delete(message)

    def release(self, messages: list[QueueMessage]) -> None:
        """Make fetched-but-unstarted messages visible again so others need not wait for them."""
        for message in messages:
            # On failure it reappears when its visibility timeout ends anyway.
            with contextlib.suppress(StorageError):
                self.storage.update_visibility(self.queue_name, message.id, message.pop_receipt, 0)
        log.info("messages_released", queue=self.queue_name, count=len(messages))

    def _deliver(self, message: QueueMessage, item: T) -> bool:
        set_current_envelope(MessageEnvelope.of(self.queue_name, message))
        try:
            failures = self.subscribers.deliver(item)
        finally:
            set_current_envelope(None)
        if failures:
            self.counters.add("failed")
            # The message stays; it becomes visible again when its visibility timeout ends.
            log.warning("message_left_for_retry", failures=len(failures))
            return False
        return True

    def _delete(self, message: QueueMessage) -> None:
        try:
            self.storage.delete_message(self.queue_name, message.id, message.pop_receipt)
        except StorageError as failure:
            # Handled but not deleted: it reappears and is handled again (at-least-once).
            log.warning("delete_failed", error=str(failure))
        self.counters.add("processed")

    def _poison(self, message: QueueMessage, *, reason: str, error: str) -> None:
        try:
            moved = poison_message(
                self.storage,
                self.queue_name,
                message,
                reason=reason,
                error=error,
                now=self.clock.now(),
            )
        except StorageError as failure:
            log.warning("poison_failed", error=str(failure))
            moved = False
        if moved:
            self.counters.add("poisoned")
