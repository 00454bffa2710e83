"""Handling one fetched message: decode, fan out, then settle it.

A message carries one item, or -- when a publisher batched them (``listener.wire.payload``)
-- several, inline or in a stored payload that is fetched first. Each item goes to every observer
in turn, in the order published, and the next item is delivered even when an earlier one failed,
so one bad item does not hold its neighbours back. The *item* is the unit of retry: when some
items of a batch failed and others succeeded, the failed ones are re-published as a new message
(``listener.producer.republish``) and the original is deleted, so the items that succeeded are not
run again. The new message records how often its items were tried (the envelope's ``attempts``):
``max_dequeue_count`` counts every delivery of an item, in whichever message. It is put before the
original is deleted, so a crash in between duplicates items and loses none; that, and the fact
that any message may be delivered twice, is why handlers must be idempotent. An item counts as
failed when any observer raised on it; retried, it goes to every observer again.

Every message ends in exactly one place:

* **deleted** after every observer returned for every item, and then its stored payload, if any,
  is replaced by a tombstone (a failure there is logged and leaves the payload, never an error);
* **dropped** (deleted with a ``duplicate_dropped`` info event, not handled) when its stored
  payload is a tombstone: it is a second copy, left by a repeated put, of a message whose work is
  done (see ``listener.wire.payload``);
* **retried**: an observer raised. A message of one item, or whose items all failed, is hidden for
  a short back-off that grows with its deliveries (not for the whole visibility timeout) and comes
  back; the failed items of a partly successful batch come back after that back-off in a new
  message, and the original is deleted;
* **poisoned**: copied to ``<queue>-poison`` with the reason, then deleted -- at once when it
  cannot be decoded (``undecodable``), is over a decoding limit (``over_limit``: the error names
  the limit and its setting), refers to another queue's stored payload (``payload_foreign``: that
  payload is left alone), its stored payload is gone (``payload_missing``) or a handler raised
  ``PermanentFailure``, or when its last allowed delivery (``max_dequeue_count``, counting earlier
  messages of the same items) failed or it arrives past that count (a worker crashed on it each
  time). When only some items of a batch failed, the record holds those items alone and its error
  names each (position, repr, error). A stored payload stays: the poison record holds the envelope
  that refers to it, so a requeue works; a requeued message starts its count afresh;
* **left** where it is when storage fails while settling: it reappears after its timeout. When
  the copy to the poison queue failed, it is moved there when it comes back, with the reason it
  was given up for, and not handled again (``listener.consumer.poisoning``).

A message's text is parsed once, first, inside the guard that settles it: what the consumer span
reads (its trace context) comes from that parse, so no message can raise outside the guard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import structlog

from listener.clock import Clock
from listener.consumer.current import MessageEnvelope, set_current_envelope
from listener.consumer.item_failures import (
    ItemFailure,
    describe_errors,
    describe_items,
    is_permanent,
    label,
)
from listener.consumer.leases import Lease
from listener.consumer.poisoning import PoisonDecision, PoisonMover
from listener.consumer.stats import ListenerCounters
from listener.consumer.subscribers import Subscribers
from listener.errors import (
    DecodeError,
    ForeignPayloadError,
    LimitExceededError,
    PayloadNotFoundError,
    StorageError,
)
from listener.failure_log import FailureMemory, poisoned
from listener.poison.admin import PoisonReason
from listener.policies.backoff import RandomSource
from listener.policies.delivery import DeliveryPolicy, exhausted, retry_visibility_s
from listener.producer.republish import remainder_content, republish
from listener.stores.payload_store import PayloadStore
from listener.stores.storage import QueueMessage, QueueStorage
from listener.tracing import consumer_span
from listener.wire.codec import Codec
from listener.wire.limits import DEFAULT_LIMITS, DecodingLimits
from listener.wire.payload import (
    Envelope,
    MessageContents,
    open_envelope,
    parse_envelope,
    retire_payload,
)

T = TypeVar("T")

log = structlog.get_logger(__name__)

REMEMBERED_ERRORS = 10_000
"""First errors kept per listener for poison records (oldest forgotten first)."""

_POISON_REASONS: tuple[tuple[type[Exception], PoisonReason], ...] = (
    (LimitExceededError, "over_limit"),
    (ForeignPayloadError, "payload_foreign"),
    (PayloadNotFoundError, "payload_missing"),
    (DecodeError, "undecodable"),
)
"""What poisons a message at once when opening it fails, most specific first."""


@dataclass(frozen=True, slots=True)
class _Reading:
    """A message's text parsed once: its envelope (None for a plain item), or why it could not
    be parsed."""

    envelope: Envelope | None
    error: Exception | None = None


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
        policy: DeliveryPolicy,
        rng: RandomSource,
        payload_store: PayloadStore | None = None,
        record_handler_time: Callable[[int, float], None] | None = None,
        limits: DecodingLimits = DEFAULT_LIMITS,
        create_poison_queue: bool = True,
    ) -> None:
        self.storage = storage
        self.queue_name = queue_name
        self.codec = codec
        self.subscribers = subscribers
        self.counters = counters
        self.clock = clock
        self.policy = policy
        self.rng = rng
        self.payload_store = payload_store
        self.limits = limits
        self.record_handler_time = record_handler_time
        """Told (1 message, seconds) the observers took on each message, settlement excluded."""
        self.poison_mover = PoisonMover(
            storage, queue_name, clock=clock, counters=counters, create_queue=create_poison_queue
        )
        """Moves messages to the poison queue; remembers why when a move fails (see there)."""
        self._first_errors: FailureMemory[str, str] = FailureMemory(REMEMBERED_ERRORS)

    def process(self, lease: Lease) -> None:
        """Decode, deliver to every observer, and settle the leased message."""
        message = lease.message
        # bind/reset rather than the bound_contextvars() context manager: a third of the cost,
        # and this runs once per message.
        tokens = structlog.contextvars.bind_contextvars(
            queue=self.queue_name, message_id=message.id, dequeue_count=message.dequeue_count
        )
        try:
            reading = self._read(message)
            with consumer_span(self.queue_name, message, reading.envelope):  # no-op without otel
                self._handle(lease, reading)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    def release(self, leases: list[Lease]) -> None:
        """Make fetched-but-unstarted messages visible again so others need not wait for them."""
        for lease in leases:
            self._set_visibility(lease, 0)
        log.info("messages_released", queue=self.queue_name, count=len(leases))

    def _read(self, message: QueueMessage) -> _Reading:
        """Parse the message's envelope within the depth limit; never raises (``_open`` settles
        a message that could not be parsed)."""
        try:
            envelope = parse_envelope(message.content, max_json_depth=self.limits.max_json_depth)
        except Exception as failure:  # settled by _open, as any failure to open a message
            return _Reading(None, failure)
        return _Reading(envelope)

    def _handle(self, lease: Lease, reading: _Reading) -> None:
        message = lease.message
        if lease.lost:
            log.warning("message_skipped", reason="lease_lost")  # another consumer owns it now
            return
        decided = self.poison_mover.pending(message)
        if decided is not None:  # an earlier move to the poison queue failed: only move it
            self.poison_mover.move(lease, decided)
            return
        if message.dequeue_count > self.policy.max_dequeue_count:
            self._poison_overdue(lease, message.dequeue_count)
            return
        opened = self._open(lease, reading)
        if opened is None:
            return
        contents, items = opened
        deliveries = contents.attempts + message.dequeue_count
        if contents.handled:
            self._drop_duplicate(lease, str(contents.payload_name))
        elif deliveries > self.policy.max_dequeue_count:
            self._poison_overdue(lease, deliveries)
        elif failed := self._deliver(lease, contents, items):
            self._after_item_failures(lease, contents, failed)
        elif self._delete(lease, items=len(items)) and contents.payload_name is not None:
            self._retire_payload(contents.payload_name)

    def _open(self, lease: Lease, reading: _Reading) -> tuple[MessageContents, list[T]] | None:
        """The message's contents and decoded items; None when it was poisoned or retried."""
        try:
            if reading.error is not None:
                raise reading.error
            contents = open_envelope(
                lease.message.content,
                reading.envelope,
                self.payload_store,
                limits=self.limits,
                queue_name=self.queue_name,
            )
            return contents, [self.codec.decode(text) for text in contents.texts]
        except (DecodeError, PayloadNotFoundError) as failure:
            reason = next(name for kind, name in _POISON_REASONS if isinstance(failure, kind))
            self._poison(lease, reason=reason, error=str(failure))
        except StorageError as failure:
            # The payload store is unreachable: retry like a failed delivery, poison eventually.
            self._after_failure(lease, describe_errors([failure]))
        except Exception as failure:
            # A codec or store bug must not end the dequeue thread: retried, then poisoned.
            log.error("message_open_failed", exc_info=failure)
            self._after_failure(lease, describe_errors([failure]))
        return None

    def _deliver(
        self, lease: Lease, contents: MessageContents, items: list[T]
    ) -> list[ItemFailure]:
        """Give every item to every observer; return the items that any observer failed on."""
        set_current_envelope(MessageEnvelope.of(self.queue_name, lease.message))
        started = self.clock.monotonic() if self.record_handler_time is not None else 0.0
        try:
            failed: list[ItemFailure] = []
            for position, (text, item) in enumerate(zip(contents.texts, items, strict=True)):
                if failures := self.subscribers.deliver(item):
                    failed.append(ItemFailure(position, text, label(item), failures))
            return failed
        finally:
            set_current_envelope(None)
            if self.record_handler_time is not None:
                self.record_handler_time(1, self.clock.monotonic() - started)

    def _after_item_failures(
        self, lease: Lease, contents: MessageContents, failed: list[ItemFailure]
    ) -> None:
        """Poison or retry what failed: only the failed items when others of the batch succeeded
        (they go on in a message of their own), else the whole message."""
        count = len(contents.texts)
        deliveries = contents.attempts + lease.message.dequeue_count
        batched = count > 1 or contents.attempts > 0
        error = describe_items(failed, count=count, batched=batched)
        permanent = is_permanent(failed)
        remainder = None
        if len(failed) < count:
            remainder = remainder_content([item.text for item in failed], attempts=deliveries)
        cause = failed[-1].failures[-1]  # the last failure: its traceback goes with a poisoning
        if remainder is None:
            self._after_failure(
                lease, error, permanent=permanent, attempts=contents.attempts, cause=cause
            )
            return
        # The other items were handled: they are not delivered again.
        self.counters.add("items_processed", count - len(failed))
        if permanent or exhausted(deliveries, self.policy):
            self.counters.add("failed")
            reason: PoisonReason = (
                "permanent_failure" if permanent else "max_dequeue_count_exceeded"
            )
            failed_items = replace(lease.message, content=remainder, dequeue_count=deliveries)
            self._poison(lease, reason=reason, error=error, message=failed_items, cause=cause)
        else:
            self.counters.add("failed")
            self._republish(lease, remainder, error, deliveries, items=(len(failed), count))

    def _after_failure(
        self,
        lease: Lease,
        error: str,
        *,
        permanent: bool = False,
        attempts: int = 0,
        cause: Exception | None = None,
    ) -> None:
        """Poison the whole message, or hide it for the retry back-off; ``cause`` is the handler's
        exception, when one decided it."""
        self.counters.add("failed")
        message = lease.message
        deliveries = attempts + message.dequeue_count
        counted = replace(message, dequeue_count=deliveries)
        if permanent:
            self._poison(lease, reason="permanent_failure", error=error, message=counted)
        elif exhausted(deliveries, self.policy):
            reason: PoisonReason = "max_dequeue_count_exceeded"
            self._poison(lease, reason=reason, error=error, message=counted, cause=cause)
        else:
            delay_s = retry_visibility_s(deliveries, self.policy, self.rng)
            self._retry_whole(lease, error, deliveries, delay_s)

    def _retry_whole(
        self, lease: Lease, error: str, deliveries: int, delay_s: int, **detail: str
    ) -> None:
        """Hide the message for ``delay_s``: it comes back whole for its next delivery."""
        self._remember(lease.message.id, error)
        log.warning(
            "message_retry_scheduled",
            message_id=lease.message.id,
            dequeue_count=deliveries,
            error=error,
            retry_in_s=delay_s,
            **detail,
        )
        self._set_visibility(lease, delay_s)

    def _republish(
        self, lease: Lease, content: str, error: str, deliveries: int, *, items: tuple[int, int]
    ) -> None:
        """Put the failed items in a new message (after the back-off), then delete the original:
        a crash in between duplicates the batch's items, it loses none."""
        message = lease.message
        delay_s = retry_visibility_s(deliveries, self.policy, self.rng)
        try:
            retry = republish(
                self.storage,
                self.queue_name,
                content,
                original=message,
                delay_s=delay_s,
                now=self.clock.now(),
            )
        except StorageError as failure:
            # The whole message comes back instead (and, if the put happened after all, the
            # failed items twice: duplicates, no loss).
            self._retry_whole(lease, error, deliveries, delay_s, republish_error=str(failure))
            return
        self._remember(retry.id, self._first_error(message.id) or error)
        failed_count, count = items
        log.warning(
            "message_retry_scheduled",
            message_id=message.id,
            dequeue_count=deliveries,
            error=error,
            retry_in_s=delay_s,
            items_failed=failed_count,
            items=count,
            retry_message_id=retry.id,
        )
        self._remove(lease)

    def _poison_overdue(self, lease: Lease, deliveries: int) -> None:
        """Poison a message delivered more often than allowed (a worker crashed on it each time)."""
        error = self._first_error(lease.message.id) or "delivered too often without success"
        counted = replace(lease.message, dequeue_count=deliveries)
        self._poison(lease, reason="max_dequeue_count_exceeded", error=error, message=counted)

    def _delete(self, lease: Lease, *, items: int) -> bool:
        """Delete the handled message (of ``items`` items); True only when this call deleted it."""
        deleted = self._remove(lease)
        self.counters.message_processed(items)
        return deleted

    def _remove(self, lease: Lease) -> bool:
        """Delete the message from its queue; True only when this call deleted it."""
        deleted: list[bool] = []

        def delete(pop_receipt: str) -> None:
            try:
                deleted.append(
                    self.storage.delete_message(self.queue_name, lease.message.id, pop_receipt)
                )
            except StorageError as failure:
                # Not deleted: it reappears and is handled again (at-least-once).
                log.warning("delete_failed", error=str(failure))

        lease.settle(delete)
        self._forget(lease.message.id)
        return any(deleted)

    def _drop_duplicate(self, lease: Lease, payload_name: str) -> None:
        """Delete a message whose payload is a tombstone: another copy's work is done."""
        log.info(
            "duplicate_dropped",
            message_id=lease.message.id,
            dequeue_count=lease.message.dequeue_count,
            payload=payload_name,
        )
        self._delete(lease, items=0)  # another copy's items were counted where it was handled

    def _retire_payload(self, name: str) -> None:
        """Replace the stored payload of a deleted message with a tombstone; log, never raise."""
        # Only after a delete that succeeded: a message that was not deleted (stale receipt)
        # is someone else's now, and they still need the payload. Should this fail, the payload
        # stays, and a duplicate copy, if any, is handled once more (at-least-once).
        store = self.payload_store
        if store is None:  # pragma: no cover - a stored payload was read through this store
            return
        try:
            retire_payload(store, name)
        except StorageError as failure:
            log.warning("payload_retire_failed", payload=name, error=str(failure))
        except Exception:
            log.exception("payload_retire_failed_unexpectedly", payload=name)

    def _set_visibility(self, lease: Lease, visibility_s: int) -> None:
        def update(pop_receipt: str) -> None:
            try:
                self.storage.update_visibility(
                    self.queue_name, lease.message.id, pop_receipt, visibility_s
                )
            except StorageError as failure:
                # It reappears when its current visibility timeout ends instead.
                log.warning("visibility_update_failed", error=str(failure))

        lease.settle(update)

    def _poison(
        self,
        lease: Lease,
        *,
        reason: PoisonReason,
        error: str,
        message: QueueMessage | None = None,
        cause: Exception | None = None,
    ) -> None:
        """Move the message to the poison queue; ``message`` is what the record holds, when it is
        not the leased message as fetched (only its failed items, or all its deliveries), and
        ``cause`` the handler's last exception, whose traceback is logged at error."""
        decision = PoisonDecision(
            reason=reason,
            error=error,
            first_error=self._first_error(lease.message.id),
            recorded=message or lease.message,
            fetched_dequeue_count=lease.message.dequeue_count,
        )
        moved = self.poison_mover.move(lease, decision)
        self._forget(lease.message.id)
        if moved and cause is not None:
            poisoned(cause)

    def _remember(self, message_id: str, error: str) -> None:
        self._first_errors.change(message_id, lambda first: first or error)

    def _first_error(self, message_id: str) -> str | None:
        return self._first_errors.get(message_id)

    def _forget(self, message_id: str) -> None:
        self._first_errors.forget(message_id)
