"""Settling a message on the event loop: the one place where each of its messages ends.

The event-loop consumer's counterpart of ``settlement``, on an ``AsyncQueueStorage``, with the
same rules, from the same pure decisions; each settlement returns its ``Outcome`` (what the
middleware's ``after_settle`` sees, as on the threaded path):

* **deleted** once the handler returned, then its stored payload, if any, replaced by a tombstone,
  and its handler's stored checkpoint, if any, removed; **dropped** (deleted,
  not handled) when its stored payload is a tombstone, a copy of done work (``wire.payload``);
  **skipped** or **rerouted** (its text put on the queue named first) by a middleware's decision;
* **retried** when it raised (or a middleware failed, or asked for it): hidden for the delivery
  policy's back-off (``retry_visibility_s``), for the delay a ``RetryLater`` asked for (reason
  ``retry_later``), or for the middleware's delay; when only some items of a publisher's batch
  failed, those items go on after that delay in a message of their own (put first, then the
  original deleted: a crash in between duplicates items, it loses none), so the others are not
  handled again;
* **poisoned** (copied to ``<queue>-poison`` with the reason, then deleted: ``poison_record``
  builds the same record as the threaded path) when it never can be opened (``undecodable``,
  ``over_limit``, ``payload_foreign``, ``payload_missing``; a payload store out of reach or a
  codec bug is retried instead, as on threads), when
  the handler raised ``PermanentFailure`` (``permanent_failure``) or a middleware gave it up
  (its reason), or at the last allowed delivery (``max_dequeue_count_exceeded``, or the reason
  of that last failure); a handler past its time limit fails with reason ``time_limit``
  (``event_loop.handling``);
* **left** where it is when storage fails while settling: it reappears after its timeout.

Where a failure goes is decided by the threaded path's pure rules (``verdicts``), counting the
deliveries of a re-published batch's items in earlier messages; the storage calls that carry out
each outcome, and their order, are ``event_loop.settle_calls``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.consumer.event_loop.counters import AsyncCounters
from cloudqueue.listener.consumer.event_loop.leases import HeldMessage
from cloudqueue.listener.consumer.event_loop.settle_calls import SettleCalls
from cloudqueue.listener.consumer.middleware import Decision, MessageContext, Outcome
from cloudqueue.listener.consumer.processing import POISON_REASONS
from cloudqueue.listener.consumer.verdicts import Verdict, judge, judge_failure, judge_items
from cloudqueue.listener.errors import DecodeError, PayloadNotFoundError, StorageError
from cloudqueue.listener.policies.backoff import RandomSource
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.async_storage import AsyncQueueStorage
from cloudqueue.listener.stores.payload_store import PayloadStore

log = structlog.get_logger(__name__)


class AsyncSettler:
    """Settles the messages of one queue on the consumer's loop; each call says how, as the
    ``Outcome`` the middleware's ``after_settle`` sees."""

    def __init__(
        self,
        storage: AsyncQueueStorage,
        queue_name: str,
        *,
        delivery: DeliveryPolicy,
        clock: Clock = SYSTEM_CLOCK,
        rng: RandomSource,
        counters: AsyncCounters,
        payload_store: PayloadStore | None = None,
        create_poison_queue: bool = True,
        queue_of: Callable[[str], str] | None = None,
    ) -> None:
        self.storage, self.queue_name = storage, queue_name
        self.queue_of = queue_of
        """For a consumer of several queues: the queue a message came from, by its id (its
        poison queue is that queue's); None for one queue."""
        self.create_poison_queue = create_poison_queue
        """False where the credential may not create queues (``create_queues = false``): a
        missing poison queue leaves the message where it is, logged."""
        self.delivery, self.clock, self.rng, self.counters = delivery, clock, rng, counters
        self.payload_store = payload_store
        """Where the payloads of large items are kept: retired here after their delete."""
        self._calls = SettleCalls(
            storage,
            queue_name,
            clock=clock,
            counters=counters,
            payload_store=payload_store,
            create_poison_queue=create_poison_queue,
            queue_of=queue_of,
        )
        self.poison = self._calls.poison
        """Poison a message (copied to its poison queue with the reason, then deleted);
        ``recorded=`` what the record holds, when not the message as fetched."""

    async def settle(self, held: HeldMessage, context: MessageContext[Any]) -> Outcome:
        """Settle a message that went through the middleware (and its handler): by a
        middleware's decision (about the failed items only, when some failed), else failed (a
        middleware's error, failed items), else deleted. Call it holding ``held.settling``: it
        uses the newest receipt."""
        decision = context.decision
        if decision is not None and context.failures and decision.kind in ("retry", "give_up"):
            return await self._items_failed(held, context, decision)
        if decision is not None:
            return await self._decided(held, decision, context.deliveries)
        if context.middleware_error is not None:
            deliveries = context.deliveries
            return await self.failed(held, context.middleware_error, deliveries=deliveries)
        if context.failures:
            return await self._items_failed(held, context)
        return await self._calls.delete(held, "deleted", payload=context.payload_name)

    async def failed(
        self,
        held: HeldMessage,
        failure: BaseException,
        *,
        reason: str | None = None,
        error: str | None = None,
        deliveries: int | None = None,
    ) -> Outcome:
        """A failed delivery (its ``deliveries``-th, earlier messages of its items included;
        None: its dequeue count): retried after the back-off (or the delay asked), or poisoned."""
        if deliveries is None:
            deliveries = held.message.dequeue_count
        verdict = judge_failure(failure, deliveries, self.delivery, self.rng, reason=reason)
        return await self._failed_whole(held, verdict, error or _describe(failure), deliveries)

    async def unopened(self, held: HeldMessage, failure: Exception) -> Outcome:
        """A message that could not be opened: poisoned with the reason when it never can be,
        else retried like a failed delivery (a payload store out of reach, a codec bug)."""
        if isinstance(failure, DecodeError | PayloadNotFoundError):
            return await self.poison(held, _unopened_reason(failure), _describe(failure))
        if not isinstance(failure, StorageError):  # a codec or store bug: logged in full
            log.error("message_open_failed", exc_info=failure)
        return await self.failed(held, failure)

    async def overdue(self, held: HeldMessage, deliveries: int) -> Outcome:
        """Poison a message delivered more often than allowed (``deliveries``, earlier messages
        of its items included), unhandled: its workers died on it each time."""
        counted = replace(held.message, dequeue_count=deliveries)
        error = "delivered too often without success"
        return await self.poison(held, "max_dequeue_count_exceeded", error, recorded=counted)

    async def drop_duplicate(self, held: HeldMessage, payload: str | None) -> Outcome:
        """Delete a message whose stored payload is a tombstone: another copy's work is done."""
        message = held.message
        log.info(
            "duplicate_dropped",
            message_id=message.id,
            dequeue_count=message.dequeue_count,
            payload=payload,
        )
        return await self._calls.delete(held, "dropped")

    async def _items_failed(
        self, held: HeldMessage, context: MessageContext[Any], decision: Decision | None = None
    ) -> Outcome:
        """Poison or retry what failed (``judge_items``): only the failed items when others of
        the batch succeeded, else the whole message; ``decision``, a middleware's about them."""
        items = judge_items(
            context.failures,
            count=len(context.items),
            attempts=context.attempts,
            deliveries=context.deliveries,
            key=None if context.envelope is None else context.envelope.key,
            policy=self.delivery,
            rng=self.rng,
            permanent=decision is not None and decision.kind == "give_up",
            reason=None if decision is None else decision.reason,
            delay_s=None if decision is None else decision.delay_s,
        )
        verdict, remainder, deliveries = items.verdict, items.remainder, context.deliveries
        if remainder is None:
            return await self._failed_whole(held, verdict, items.error, deliveries)
        self.counters.failed += 1
        if verdict.poison_reason is None:
            return await self._calls.republish(held, context, remainder, verdict, items.error)
        failed_items = replace(held.message, content=remainder, dequeue_count=deliveries)
        return await self.poison(held, verdict.poison_reason, items.error, recorded=failed_items)

    async def _failed_whole(
        self, held: HeldMessage, verdict: Verdict, error: str, deliveries: int
    ) -> Outcome:
        """The whole message poisoned (as delivered ``deliveries`` times), or hidden."""
        self.counters.failed += 1
        if verdict.poison_reason is not None:
            counted = replace(held.message, dequeue_count=deliveries)
            return await self.poison(held, verdict.poison_reason, error, recorded=counted)
        return await self._calls.hide(held, verdict.retry_in_s, error, reason=verdict.reason)

    async def _decided(self, held: HeldMessage, decision: Decision, deliveries: int) -> Outcome:
        """What a middleware decided: skip, give up, retry later, or re-route (a deferral
        cannot be made here: ``MessageContext.defer`` refuses it, so it never comes); a give-up
        or retry is judged as on threads (``judge``), at the message's ``deliveries``."""
        if decision.kind == "skip":
            log.info("message_skipped", message_id=held.message.id, reason=decision.reason)
            return await self._calls.delete(held, "skipped", decision.reason)
        if decision.kind == "reroute" and decision.queue_name is not None:
            return await self._reroute(held, decision.queue_name, decision.reason)
        verdict = judge(
            deliveries,
            self.delivery,
            self.rng,
            permanent=decision.kind == "give_up",
            reason=decision.reason,
            delay_s=decision.delay_s,
        )
        error = decision.error or decision.reason
        return await self._failed_whole(held, verdict, error, deliveries)

    async def _reroute(self, held: HeldMessage, target: str, reason: str) -> Outcome:
        """Put the message's text on ``target``, then delete it here (a crash in between
        leaves it on both queues: a duplicate, never a loss)."""
        try:
            await self.storage.put_message(target, held.message.content)
        except StorageError as failure:
            return await self.failed(held, failure, error=f"rerouting to {target!r} failed")
        log.info("message_rerouted", message_id=held.message.id, queue_to=target)
        return await self._calls.delete(held, "rerouted", reason)


def _unopened_reason(failure: Exception) -> str:
    """The threaded path's poison reason for a message that cannot be opened."""
    return next((name for kind, name in POISON_REASONS if isinstance(failure, kind)), "undecodable")


def _describe(failure: BaseException) -> str:
    return f"{type(failure).__name__}: {failure}"[:500]
