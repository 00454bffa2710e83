"""The storage calls that end a message on the event loop, each returning its ``Outcome``.

What ``event_loop.settling`` decided is done here, on an ``AsyncQueueStorage``, in the order that
never loses a message (a crash between two calls duplicates, it never loses):

* **delete**, then retire the handled message's stored payload, if any (``lease_calls.retire``,
  on a worker thread: the payload store is sync) and remove its handler's stored checkpoint, if
  any (``lease_calls.forget``); a delete that finds the message gone (handled past its visibility
  timeout: another get owns it) leaves it;
* **hide** it for a retry's delay (``update_visibility``);
* **republish** a batch's failed items: put them in a new message hidden for the delay first,
  then delete the original (a failed put hides the whole message instead);
* **poison**: copy it to ``<queue>-poison`` (``poison_record``: the threaded path's record; the
  poison queue created again when it was deleted while the worker runs, unless the credential may
  not create queues), then delete it;
* **left** where it is when storage fails in any of these: it reappears after its timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer import lease_calls
from cloudqueue.listener.consumer.event_loop.counters import AsyncCounters
from cloudqueue.listener.consumer.event_loop.leases import HeldMessage
from cloudqueue.listener.consumer.middleware import MessageContext, Outcome, OutcomeKind
from cloudqueue.listener.consumer.settlement import DELETED
from cloudqueue.listener.consumer.verdicts import Verdict, retry_log_level
from cloudqueue.listener.errors import MessageTooLargeError, QueueNotFoundError, StorageError
from cloudqueue.listener.poison.move import poison_record
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.poison.record import PoisonRecord
from cloudqueue.listener.producer.republish import republished_timing
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.prioritized import as_in_queue
from cloudqueue.listener.stores.storage import NEVER_EXPIRES, QueueMessage

log = structlog.get_logger(__name__)


class SettleCalls:
    """One queue's settling calls on its consumer's loop, counted in its ``counters``."""

    def __init__(
        self,
        storage: AsyncQueueStorage,
        queue_name: str,
        *,
        clock: Clock,
        counters: AsyncCounters,
        payload_store: PayloadStore | None,
        create_poison_queue: bool,
        queue_of: Callable[[str], str] | None,
    ) -> None:
        self.storage, self.queue_name, self.queue_of = storage, queue_name, queue_of
        self.clock, self.counters, self.payload_store = clock, counters, payload_store
        self.create_poison_queue = create_poison_queue
        self._log = log.bind(queue=queue_name)

    async def poison(
        self,
        held: HeldMessage,
        reason: str,
        error: str,
        *,
        recorded: QueueMessage | None = None,
    ) -> Outcome:
        """Copy to the poison queue first, delete second: a crash between leaves a duplicate.
        ``recorded`` is what the record holds, when not the message as fetched (its failed items
        only, or all their deliveries)."""
        message = held.message
        queue = self.queue_name if self.queue_of is None else self.queue_of(message.id)
        kept = as_in_queue(recorded or message, queue)
        record = poison_record(queue, kept, reason=reason, error=error, now=self.clock.now())
        target = poison_queue_name(queue)
        try:
            try:
                await self._put_record(target, record)
            except QueueNotFoundError:
                if not self.create_poison_queue:
                    raise
                # Deleted while the worker runs: a message must not loop for ever for want of it.
                await self.storage.create_queue(target)
                self._log.warning("poison_queue_recreated", poison_queue=target)
                await self._put_record(target, record)
            await self.storage.delete_message(self.queue_name, message.id, held.pop_receipt)
        except StorageError as failure:
            return self.left(message, failure, reason)
        self.counters.poisoned += 1
        self._log.warning(
            "message_poisoned",
            poison_queue=target,
            message_id=message.id,
            dequeue_count=message.dequeue_count,
            reason=reason,
            error=error,
        )
        return Outcome("poisoned", reason, error)

    async def republish(
        self,
        held: HeldMessage,
        context: MessageContext[Any],
        content: str,
        verdict: Verdict,
        error: str,
    ) -> Outcome:
        """Put the failed items (``content``) in a new message hidden for the verdict's delay,
        then delete the original: a crash in between duplicates items, it loses none. A failed
        put retries the whole message instead."""
        message, delay_s = held.message, verdict.retry_in_s
        time_to_live_s, hidden_s = republished_timing(message, delay_s, self.clock.now())
        try:
            retry = await self.storage.put_message(
                context.queue_name,  # the queue it came from, for a consumer of several
                content,
                time_to_live_s=time_to_live_s,
                visibility_delay_s=hidden_s,
            )
        except StorageError as failure:
            detail = {"republish_error": str(failure)}
            return await self.hide(held, delay_s, error, reason=verdict.reason, **detail)
        try:
            await self.storage.delete_message(self.queue_name, message.id, held.pop_receipt)
        except StorageError as failure:  # both copies of the failed items come back: no loss
            return self.left(message, failure, verdict.reason)
        return self._retried(
            message,
            delay_s,
            error,
            verdict.reason,
            items_failed=len(context.failures),
            items=len(context.items),
            retry_message_id=retry.id,
        )

    async def delete(
        self,
        held: HeldMessage,
        kind: OutcomeKind,
        reason: str | None = None,
        *,
        payload: str | None = None,
    ) -> Outcome:
        """Delete the message; then, for a handled one, retire its stored ``payload``, if any."""
        message = held.message
        try:
            deleted = await self.storage.delete_message(
                self.queue_name, message.id, held.pop_receipt
            )
        except StorageError as failure:
            return self.left(message, failure, "delete_failed")
        if not deleted:  # handled past its visibility timeout: another get owns it now
            self.counters.processed += 1
            self._log.warning("message_not_deleted_after_handling", message_id=message.id)
            return Outcome("left", "delete_failed")
        if payload is not None:  # rare (large items): the sync store's call off the loop
            await asyncio.to_thread(lease_calls.retire, self.payload_store, payload)
        if held.checkpoint_payload is not None:  # as rare: a checkpoint too large for it
            await asyncio.to_thread(lease_calls.forget, self.payload_store, held.checkpoint_payload)
        # Counted once the payload is retired too, as on the threaded path: whoever waits for
        # the count then sees the message's whole settlement.
        self.counters.processed += 1
        return DELETED if kind == "deleted" else Outcome(kind, reason)

    async def hide(
        self, held: HeldMessage, delay_s: int, error: str, *, reason: str | None, **detail: str
    ) -> Outcome:
        """Retry the message: hidden for ``delay_s``, then delivered again."""
        message = held.message
        try:
            await self.storage.update_visibility(
                self.queue_name, message.id, held.pop_receipt, delay_s
            )
        except StorageError as failure_to_hide:
            return self.left(message, failure_to_hide, reason)
        return self._retried(message, delay_s, error, reason, **detail)

    def left(self, message: QueueMessage, failure: StorageError, reason: str | None) -> Outcome:
        """Storage failed while settling: the message reappears after its timeout."""
        self.counters.left += 1
        self._log.warning("message_left_in_queue", message_id=message.id, error=str(failure))
        return Outcome("left", reason, str(failure))

    def _retried(
        self,
        message: QueueMessage,
        delay_s: int,
        error: str,
        reason: str | None,
        **detail: object,
    ) -> Outcome:
        """Count and log a retry (of ``message``, or of its failed items in a new message)."""
        self.counters.retried += 1
        getattr(self._log, retry_log_level(reason))(  # as on threads
            "message_retry_scheduled",
            message_id=message.id,
            dequeue_count=message.dequeue_count,
            error=error,
            retry_in_s=delay_s,
            **({"reason": reason} if reason else {}),
            **detail,
        )
        return Outcome("retried", reason, error, retry_in_s=delay_s)

    async def _put_record(self, target: str, record: PoisonRecord) -> None:
        try:
            await self.storage.put_message(target, record.to_json(), time_to_live_s=NEVER_EXPIRES)
        except MessageTooLargeError:  # as poison_message: keep the content, unwrapped
            await self.storage.put_message(target, record.content, time_to_live_s=NEVER_EXPIRES)
