"""One message on the event loop: decoded, handled under its time limit, settled where it ends.

The event-loop consumer's counterpart of ``processing`` and ``settlement``, on an
``AsyncQueueStorage``, with the same rules, from the same pure decisions:

* **deleted** once the handler returned;
* **retried** when it raised: hidden for the delivery policy's back-off (``retry_visibility_s``),
  or for the delay a ``RetryLater`` asked for (reason ``retry_later``);
* **poisoned** (copied to ``<queue>-poison`` with the reason, then deleted: ``poison_record``
  builds the same record as the threaded path) when it cannot be opened (``undecodable``,
  ``over_limit``, ``payload_missing``: a payload kept in a blob is not fetched here yet), when
  the handler raised ``PermanentFailure`` (``permanent_failure``), or at the last allowed delivery
  (``max_dequeue_count_exceeded``, or the reason of that last failure);
* a handler past ``time_limit_s`` is **cancelled** (``asyncio.timeout``): a failed delivery with
  reason ``time_limit``, retried or poisoned as any other;
* **left** where it is when storage fails while settling: it reappears after its timeout.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.consumer.async_leases import HeldMessage
from cloudqueue.listener.consumer.item_failures import judged
from cloudqueue.listener.consumer.processing import POISON_REASONS
from cloudqueue.listener.errors import (
    MessageTooLargeError,
    PermanentFailure,
    QueueNotFoundError,
    RetryLater,
    StorageError,
)
from cloudqueue.listener.poison.move import poison_record
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.poison.record import PoisonRecord
from cloudqueue.listener.policies.backoff import RandomSource
from cloudqueue.listener.policies.delivery import DeliveryPolicy, exhausted, retry_visibility_s
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.storage import NEVER_EXPIRES, QueueMessage
from cloudqueue.listener.wire.codec import Codec
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS, DecodingLimits
from cloudqueue.listener.wire.payload import open_envelope

T = TypeVar("T")

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Where a failed delivery goes: the poison queue (with ``poison_reason``) or back to the
    queue in ``retry_in_s`` seconds (with ``reason``, when the failure gave one)."""

    poison_reason: str | None
    retry_in_s: int = 0
    reason: str | None = None


def judge_failure(
    failure: BaseException,
    dequeue_count: int,
    policy: DeliveryPolicy,
    rng: RandomSource,
    *,
    reason: str | None = None,
) -> Verdict:
    """The threaded settlement's rule for a message failed as a whole (``Settlement.failed``)."""
    failure = judged(failure)
    if isinstance(failure, PermanentFailure):
        return Verdict(reason or "permanent_failure")
    if isinstance(failure, RetryLater):
        reason = reason or "retry_later"
    if exhausted(dequeue_count, policy):
        return Verdict(reason or "max_dequeue_count_exceeded")
    if isinstance(failure, RetryLater):
        return Verdict(None, math.ceil(failure.visibility_s), reason)
    return Verdict(None, retry_visibility_s(dequeue_count, policy, rng), reason)


@dataclass(slots=True)
class AsyncCounters:
    """What the consumer did so far (read on its loop, or as a snapshot from anywhere)."""

    processed: int = 0
    failed: int = 0
    retried: int = 0
    poisoned: int = 0
    left: int = 0
    dequeue_errors: int = 0
    in_flight: int = 0


class AsyncSettler(Generic[T]):
    """Handles and settles the messages of one queue, each on the consumer's loop."""

    def __init__(
        self,
        storage: AsyncQueueStorage,
        queue_name: str,
        handler: Callable[[T], Awaitable[None]],
        codec: Codec[T],
        *,
        delivery: DeliveryPolicy,
        time_limit_s: float,
        limits: DecodingLimits = DEFAULT_LIMITS,
        clock: Clock = SYSTEM_CLOCK,
        rng: RandomSource,
        counters: AsyncCounters,
    ) -> None:
        self.storage, self.queue_name = storage, queue_name
        self.handler, self.codec = handler, codec
        self.delivery, self.time_limit_s, self.limits = delivery, time_limit_s, limits
        self.clock, self.rng, self.counters = clock, rng, counters
        self._log = log.bind(queue=queue_name)

    async def handle(self, held: HeldMessage) -> None:
        """Open, handle and settle one held message (renewed meanwhile: the settlement uses
        its newest receipt, with no renewal on its way)."""
        message = held.message
        try:
            items = self._open(message)
        except Exception as unopened:  # it never can be opened: poisoned with the reason
            async with held.settling:
                await self._poison(
                    message, held.pop_receipt, _unopened_reason(unopened), _describe(unopened)
                )
            return
        failure: BaseException | None = None
        limit = asyncio.timeout(self.time_limit_s or None)
        try:
            async with limit:
                for item in items:  # a publisher's batch: its items in order, all or none
                    await self.handler(item)
        except Exception as raised:  # a handler's own TimeoutError is its failure, not the limit
            failure = raised
        reason = "time_limit" if limit.expired() else None
        async with held.settling:
            if failure is None:
                await self._delete(message, held.pop_receipt)
            else:
                await self._failed(message, held.pop_receipt, failure, reason=reason)

    def _open(self, message: QueueMessage) -> list[T]:
        """The message's items, through its envelope (packed or compressed by a ``Publisher``)
        within the decoding limits, as the threaded ``Processor`` opens it."""
        envelope = parse_envelope(message.content, max_json_depth=self.limits.max_json_depth)
        contents = open_envelope(
            message.content, envelope, None, limits=self.limits, queue_name=self.queue_name
        )
        return [self.codec.decode(text) for text in contents.texts]

    async def _delete(self, message: QueueMessage, pop_receipt: str) -> None:
        try:
            deleted = await self.storage.delete_message(self.queue_name, message.id, pop_receipt)
        except StorageError as failure:
            self._left(message, failure)
            return
        self.counters.processed += 1
        if not deleted:  # handled past its visibility timeout: another get owns it now
            self._log.warning("message_not_deleted_after_handling", message_id=message.id)

    async def _failed(
        self,
        message: QueueMessage,
        pop_receipt: str,
        failure: BaseException,
        *,
        reason: str | None = None,
    ) -> None:
        self.counters.failed += 1
        error = "time limit exceeded" if reason == "time_limit" else _describe(failure)
        verdict = judge_failure(
            failure, message.dequeue_count, self.delivery, self.rng, reason=reason
        )
        if verdict.poison_reason is not None:
            await self._poison(message, pop_receipt, verdict.poison_reason, error)
            return
        try:
            await self.storage.update_visibility(
                self.queue_name, message.id, pop_receipt, verdict.retry_in_s
            )
        except StorageError as failure_to_hide:
            self._left(message, failure_to_hide)
            return
        self.counters.retried += 1
        self._log.info(
            "message_retry_scheduled",
            message_id=message.id,
            dequeue_count=message.dequeue_count,
            error=error,
            retry_in_s=verdict.retry_in_s,
            **({"reason": verdict.reason} if verdict.reason else {}),
        )

    async def _poison(
        self, message: QueueMessage, pop_receipt: str, reason: str, error: str
    ) -> None:
        """Copy to the poison queue first, delete second: a crash between leaves a duplicate."""
        record = poison_record(
            self.queue_name, message, reason=reason, error=error, now=self.clock.now()
        )
        target = poison_queue_name(self.queue_name)
        try:
            try:
                await self._put_record(target, record)
            except QueueNotFoundError:
                # Deleted while the worker runs: a message must not loop for ever for want of it.
                await self.storage.create_queue(target)
                self._log.warning("poison_queue_recreated", poison_queue=target)
                await self._put_record(target, record)
            await self.storage.delete_message(self.queue_name, message.id, pop_receipt)
        except StorageError as failure:
            self._left(message, failure)
            return
        self.counters.poisoned += 1
        self._log.warning(
            "message_poisoned",
            poison_queue=target,
            message_id=message.id,
            dequeue_count=message.dequeue_count,
            reason=reason,
            error=error,
        )

    async def _put_record(self, target: str, record: PoisonRecord) -> None:
        try:
            await self.storage.put_message(target, record.to_json(), time_to_live_s=NEVER_EXPIRES)
        except MessageTooLargeError:  # as poison_message: keep the content, unwrapped
            await self.storage.put_message(target, record.content, time_to_live_s=NEVER_EXPIRES)

    def _left(self, message: QueueMessage, failure: StorageError) -> None:
        """Storage failed while settling: the message reappears after its timeout."""
        self.counters.left += 1
        self._log.warning("message_left_in_queue", message_id=message.id, error=str(failure))


def _unopened_reason(failure: Exception) -> str:
    """The threaded path's poison reason for a message that cannot be opened."""
    return next((name for kind, name in POISON_REASONS if isinstance(failure, kind)), "undecodable")


def _describe(failure: BaseException) -> str:
    return f"{type(failure).__name__}: {failure}"[:500]
