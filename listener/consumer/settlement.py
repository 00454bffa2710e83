"""Settling a message: the one place where every fetched message ends.

Every message ends in exactly one place, recorded as its ``MessageContext.outcome``:

* **deleted** after every observer returned for every item, and then its stored payload, if any,
  is replaced by a tombstone (a failure there is logged and leaves the payload, never an error);
* **dropped** (deleted with a ``duplicate_dropped`` info event, not handled) when its stored
  payload is a tombstone: it is a second copy, left by a repeated put, of a message whose work is
  done (see ``cloudqueue.listener.wire.payload``);
* **skipped** or **rerouted** by a middleware (deleted here; a rerouted message's text is put on
  the queue it names first);
* **retried**: an observer raised (or a middleware asked for it). A message of one item, or whose
  items all failed, is hidden for a short back-off that grows with its deliveries (not for the
  whole visibility timeout) and comes back -- or for the delay its handler asked for by raising
  ``RetryLater`` (reason ``retry_later``; the delivery counts, so a handler that asks forever
  ends in the poison queue with that reason); the failed items of a partly successful batch come
  back after that back-off in a new message, and the original is deleted. The new message is put
  before the original is deleted, so a crash in between duplicates items and loses none;
* **poisoned**: copied to ``<queue>-poison`` with the reason, then deleted
  (``cloudqueue.listener.consumer.poisoning``, which also keeps the reason when that copy fails);
* **left** where it is when storage fails while settling: it reappears after its timeout;
* **deferred** by a middleware: nothing happens to it here; still held, it is handled later
  (``cloudqueue.listener.consumer.deferrals``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import structlog

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer import lease_calls
from cloudqueue.listener.consumer.failure_logs import FailureMemory
from cloudqueue.listener.consumer.leases import Lease
from cloudqueue.listener.consumer.middleware import MessageContext, Outcome, OutcomeKind
from cloudqueue.listener.consumer.poisoning import PoisonDecision, PoisonMover
from cloudqueue.listener.consumer.stats import ListenerCounters
from cloudqueue.listener.consumer.verdicts import (
    RETRY_LATER,
    Verdict,
    judge,
    judge_items,
    retry_log_level,
)
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.policies.backoff import RandomSource
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.producer.republish import republish
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage

log = structlog.get_logger(__name__)

DELETED = Outcome("deleted")
"""The outcome of nearly every message: made once."""

REMEMBERED_ERRORS = 10_000
"""First errors kept per listener for poison records (oldest forgotten first)."""


class Settlement:
    """Deletes, retries, re-publishes, poisons or releases the messages of one queue."""

    def __init__(
        self,
        *,
        storage: QueueStorage,
        queue_name: str,
        counters: ListenerCounters,
        clock: Clock,
        policy: DeliveryPolicy,
        rng: RandomSource,
        payload_store: PayloadStore | None,
        create_poison_queue: bool,
    ) -> None:
        self.storage = storage
        self.queue_name = queue_name
        self.counters = counters
        self.clock = clock
        self.policy = policy
        self.rng = rng
        self.payload_store = payload_store
        self.poison_mover = PoisonMover(
            storage, queue_name, clock=clock, counters=counters, create_queue=create_poison_queue
        )
        """Moves messages to the poison queue; remembers why when a move fails (see there)."""
        self._first_errors: FailureMemory[str, str] = FailureMemory(REMEMBERED_ERRORS)

    # -- after handling ---------------------------------------------------------------------

    def handled(self, lease: Lease, context: MessageContext[Any], texts: list[str]) -> None:
        """Settle a message whose items went through the middleware (and the observers)."""
        decision = context.decision
        if decision is not None and context.failures and decision.kind in ("retry", "give_up"):
            # A decision about failed items: the items that succeeded stay done.
            self._items_failed(
                lease,
                context,
                texts,
                permanent=decision.kind == "give_up",
                reason=decision.reason,
                delay_s=decision.delay_s,
            )
        elif decision is not None:
            self._decided(lease, context)
        elif context.middleware_error is not None:
            error = f"{type(context.middleware_error).__name__}: {context.middleware_error}"
            self.failed(lease, context, error)
        elif context.failures:
            self._items_failed(lease, context, texts)
        else:
            self.delete(lease, context, "deleted", items=len(texts))

    def delete(
        self, lease: Lease, context: MessageContext[Any], kind: OutcomeKind, *, items: int
    ) -> None:
        """Delete the message (of ``items`` items), then retire its stored payload, if any."""
        self._first_errors.forget(lease.message.id)
        if lease_calls.delete(self.storage, self.queue_name, lease):
            decided = context.decision
            reason = None if decided is None else decided.reason
            context.outcome = DELETED if kind == "deleted" else Outcome(kind, reason)
            payload = context.payload_name
            if payload is not None and kind == "deleted":
                lease_calls.retire(self.payload_store, payload)
            if lease.checkpoint_payload is not None:
                lease_calls.forget(self.payload_store, lease.checkpoint_payload)
        else:
            context.outcome = Outcome("left", "delete_failed")
        self.counters.message_processed(items)

    def failed(
        self,
        lease: Lease,
        context: MessageContext[Any],
        error: str,
        *,
        permanent: bool = False,
        reason: str | None = None,
        delay_s: float | None = None,
    ) -> None:
        """Poison the whole message, or hide it for the retry back-off (or ``delay_s``)."""
        verdict = judge(
            context.deliveries,
            self.policy,
            self.rng,
            permanent=permanent,
            reason=reason,
            delay_s=delay_s,
        )
        self._failed_whole(lease, context, error, verdict)

    def poison(
        self,
        lease: Lease,
        context: MessageContext[Any],
        reason: str,
        error: str,
        *,
        recorded: QueueMessage | None = None,
    ) -> None:
        """Move the message to the poison queue; ``recorded`` is what the record holds, when it is
        not the leased message as fetched (its failed items only, or all its deliveries)."""
        decision = PoisonDecision(
            reason=reason,
            error=error,
            first_error=self._first_errors.get(lease.message.id),
            recorded=recorded or lease.message,
            fetched_dequeue_count=lease.message.dequeue_count,
        )
        moved = self.poison_mover.move(lease, decision, context.queue_name)
        self._first_errors.forget(lease.message.id)
        context.outcome = Outcome("poisoned" if moved else "left", reason, error)

    def move_pending(self, lease: Lease, context: MessageContext[Any]) -> None:
        """Move a message whose earlier move to the poison queue failed, with the reason it was
        given up for: it is not handled again."""
        decided = self.poison_mover.pending(lease.message)
        if decided is None:  # pragma: no cover - asked only when one is pending
            return
        moved = self.poison_mover.move(lease, decided, context.queue_name)
        context.outcome = Outcome("poisoned" if moved else "left", decided.reason, decided.error)

    def overdue(self, lease: Lease, context: MessageContext[Any]) -> None:
        """Poison a message delivered more often than allowed (a worker crashed on it each time)."""
        error = self._first_errors.get(lease.message.id) or "delivered too often without success"
        counted = replace(lease.message, dequeue_count=context.deliveries)
        self.poison(lease, context, "max_dequeue_count_exceeded", error, recorded=counted)

    def drop_duplicate(self, lease: Lease, context: MessageContext[Any]) -> None:
        """Delete a message whose payload is a tombstone: another copy's work is done."""
        log.info(
            "duplicate_dropped",
            message_id=lease.message.id,
            dequeue_count=lease.message.dequeue_count,
            payload=context.payload_name,
        )
        # Another copy's items were counted where it was handled.
        self.delete(lease, context, "dropped", items=0)

    def release(self, leases: list[Lease]) -> None:
        """Make fetched-but-unstarted messages visible again so others need not wait for them."""
        for lease in leases:
            self._set_visibility(lease, 0)
        log.info("messages_released", queue=self.queue_name, count=len(leases))

    # -- decisions and failures --------------------------------------------------------------

    def _decided(self, lease: Lease, context: MessageContext[Any]) -> None:
        decision = context.decision
        assert decision is not None  # the caller checked
        if decision.kind == "skip":
            log.info("message_skipped", message_id=lease.message.id, reason=decision.reason)
            self.delete(lease, context, "skipped", items=0)
        elif decision.kind == "give_up":
            error = decision.error or decision.reason
            self.failed(lease, context, error, permanent=True, reason=decision.reason)
        elif decision.kind == "retry":
            error = decision.error or decision.reason
            self.failed(lease, context, error, reason=decision.reason, delay_s=decision.delay_s)
        elif decision.kind == "defer":  # still held: the deferrals put it back in line
            context.outcome = Outcome("deferred", decision.reason)
        else:
            self._reroute(lease, context, str(decision.queue_name))

    def _reroute(self, lease: Lease, context: MessageContext[Any], target: str) -> None:
        """Put the message's text on ``target``, then delete it here (a crash in between leaves
        it on both queues: a duplicate, never a loss)."""
        try:
            self.storage.put_message(target, lease.message.content)
        except StorageError as failure:
            self.failed(lease, context, f"rerouting to {target!r} failed: {failure}")
            return
        log.info("message_rerouted", message_id=lease.message.id, queue_to=target)
        self.delete(lease, context, "rerouted", items=0)

    def _items_failed(
        self,
        lease: Lease,
        context: MessageContext[Any],
        texts: list[str],
        *,
        permanent: bool = False,
        reason: str | None = None,
        delay_s: float | None = None,
    ) -> None:
        """Poison or retry what failed: only the failed items when others of the batch succeeded
        (they go on in a message of their own), else the whole message (``judge_items``).
        ``permanent``, ``reason`` and ``delay_s`` carry a middleware's decision about the
        failure."""
        failed, count = context.failures, len(texts)
        items = judge_items(
            failed,
            count=count,
            attempts=context.attempts,
            deliveries=context.deliveries,
            key=None if context.envelope is None else context.envelope.key,
            policy=self.policy,
            rng=self.rng,
            permanent=permanent,
            reason=reason,
            delay_s=delay_s,
        )
        if items.asked:
            self.counters.add("retried_later")
        verdict, remainder = items.verdict, items.remainder
        if remainder is None:
            self._failed_whole(lease, context, items.error, verdict)
            return
        self.counters.add("items_processed", count - len(failed))
        self.counters.add("failed")
        if verdict.poison_reason is not None:
            failed_items = replace(
                lease.message, content=remainder, dequeue_count=context.deliveries
            )
            self.poison(lease, context, verdict.poison_reason, items.error, recorded=failed_items)
        else:
            counts = (len(failed), count)
            self._republish(lease, context, remainder, items.error, items=counts, verdict=verdict)

    def _failed_whole(
        self, lease: Lease, context: MessageContext[Any], error: str, verdict: Verdict
    ) -> None:
        """Poison the whole message, or hide it, as ``verdict`` says."""
        self.counters.add("failed")
        if verdict.poison_reason is not None:
            counted = replace(lease.message, dequeue_count=context.deliveries)
            self.poison(lease, context, verdict.poison_reason, error, recorded=counted)
        else:
            self._retry_whole(lease, context, error, verdict.retry_in_s, reason=verdict.reason)

    def _retry_whole(
        self,
        lease: Lease,
        context: MessageContext[Any],
        error: str,
        delay_s: int,
        *,
        reason: str | None = None,
        **detail: str,
    ) -> None:
        """Hide the message for ``delay_s``: it comes back whole for its next delivery."""
        self._remember(lease.message.id, error)
        _retry_log(reason)(
            "message_retry_scheduled",
            message_id=lease.message.id,
            dequeue_count=context.deliveries,
            error=error,
            retry_in_s=delay_s,
            **({"reason": reason} if reason else {}),
            **detail,
        )
        self._set_visibility(lease, delay_s)
        context.outcome = Outcome("retried", reason, error, retry_in_s=delay_s)

    def _republish(
        self,
        lease: Lease,
        context: MessageContext[Any],
        content: str,
        error: str,
        *,
        items: tuple[int, int],
        verdict: Verdict,
    ) -> None:
        """Put the failed items in a new message, hidden for the ``verdict``'s delay, then
        delete the original: a crash in between duplicates the batch's items, it loses none."""
        message, deliveries = lease.message, context.deliveries
        delay, reason = verdict.retry_in_s, verdict.reason
        try:
            retry = republish(
                self.storage,
                context.queue_name,  # the queue it came from, when the listener reads several
                content,
                original=message,
                delay_s=delay,
                now=self.clock.now(),
            )
        except StorageError as failure:
            # The whole message comes back instead (and, if the put happened after all, the
            # failed items twice: duplicates, no loss).
            self._retry_whole(
                lease, context, error, delay, reason=reason, republish_error=str(failure)
            )
            return
        self._remember(retry.id, self._first_errors.get(message.id) or error)
        failed_count, count = items
        _retry_log(reason)(
            "message_retry_scheduled",
            message_id=message.id,
            dequeue_count=deliveries,
            error=error,
            retry_in_s=delay,
            **({"reason": reason} if reason else {}),
            items_failed=failed_count,
            items=count,
            retry_message_id=retry.id,
        )
        self._remove(lease)
        context.outcome = Outcome("retried", reason, error, retry_in_s=delay)

    def _remove(self, lease: Lease) -> bool:
        """Delete the message from its queue; True only when this call deleted it."""
        self._first_errors.forget(lease.message.id)
        return lease_calls.delete(self.storage, self.queue_name, lease)

    def _set_visibility(self, lease: Lease, visibility_s: int) -> None:
        lease_calls.set_visibility(self.storage, self.queue_name, lease, visibility_s)

    def _remember(self, message_id: str, error: str) -> None:
        self._first_errors.change(message_id, lambda first: first or error)


def _retry_log(reason: str | None) -> Any:
    return getattr(log, retry_log_level(reason))


__all__ = ["RETRY_LATER", "Settlement"]
