"""Handling one fetched message: read it once, open it, hand its items through the middleware to
the observers, then give it to settlement (``cloudqueue.listener.consumer.settlement``).

A message carries one item, or -- when a publisher batched them
(``cloudqueue.listener.wire.payload``) -- several, inline or in a stored payload that is fetched
first. Its text is parsed once, first,
inside the guard that settles it; the middleware see that parse (``MessageContext.envelope``:
the consumer span reads its trace context from it), so no message can raise outside the guard.
Each item goes to every observer in turn, in the order published, and the next item is delivered
even when an earlier one failed, so one bad item does not hold its neighbours back. An item counts
as failed when any observer raised on it; the *item* is the unit of retry (see settlement).

Before any of that, a message is poisoned at once when it cannot be decoded (``undecodable``), is
over a decoding limit (``over_limit``: the error names the limit and its setting), refers to
another queue's stored payload (``payload_foreign``: that payload is left alone) or to one that is
gone (``payload_missing``), or arrives past ``max_dequeue_count`` (a worker crashed on it each
time). A message whose earlier move to the poison queue failed is only moved there now. A message
delayed beyond 7 days that is not due yet is hidden again, unopened
(``cloudqueue.listener.consumer.hops``).

The message's key (``MessageContext.key``) is the one its envelope carries, else what the
worker's key function gives for its items; a key function that raises poisons the message at
once (``key_failed``: it would raise on every delivery). A message a middleware deferred is left
held (``cloudqueue.listener.consumer.deferrals``), not settled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

import structlog

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.current import set_current_message
from cloudqueue.listener.consumer.deferrals import Deferrals
from cloudqueue.listener.consumer.hops import DelayHops
from cloudqueue.listener.consumer.item_failures import ItemFailure, describe_errors, label
from cloudqueue.listener.consumer.leases import Lease, LeaseKeeper
from cloudqueue.listener.consumer.middleware import MessageContext, Outcome, Resume
from cloudqueue.listener.consumer.reporting import HeldMessage
from cloudqueue.listener.consumer.settlement import Settlement
from cloudqueue.listener.consumer.stack import MiddlewareStack
from cloudqueue.listener.consumer.subscribers import Subscribers
from cloudqueue.listener.consumer.time_limits import TimeLimits
from cloudqueue.listener.errors import (
    DecodeError,
    ForeignPayloadError,
    LimitExceededError,
    PayloadNotFoundError,
    StorageError,
)
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import MAX_VISIBILITY_TIMEOUT_S
from cloudqueue.listener.wire.bounded_json import values_limited
from cloudqueue.listener.wire.codec import Codec
from cloudqueue.listener.wire.envelope import Envelope, parse_envelope
from cloudqueue.listener.wire.keys import key_text
from cloudqueue.listener.wire.limits import DecodingLimits
from cloudqueue.listener.wire.payload import MessageContents, open_envelope

T = TypeVar("T")

KeyFunction = Callable[[T], object]
"""The worker's key of an item (None: it has none), for messages that carry no key."""

log = structlog.get_logger(__name__)

POISON_REASONS: tuple[tuple[type[Exception], str], ...] = (
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


def worker_key(key_of: KeyFunction[T], items: list[T]) -> str | None:
    """The key the worker gives every item of a message that carries none; None when it gives
    none, or different ones (raises what ``key_of`` raises: the message is poisoned
    ``key_failed``)."""
    keys = {None if (value := key_of(item)) is None else key_text(value) for item in items}
    return keys.pop() if len(keys) == 1 else None


def decode_items(codec: Codec[T], texts: list[str], max_values: int) -> list[T]:
    """The items of ``texts``, parsed within ``max_values`` JSON values in all."""
    if sum(map(len, texts)) <= max_values:  # no more values than characters: no count
        return [codec.decode(text) for text in texts]
    with values_limited(max_values):
        return [codec.decode(text) for text in texts]


class MessageProcessor(Generic[T]):
    """Takes one message of one queue through reading, decoding, its middleware and handlers."""

    def __init__(
        self,
        *,
        queue_name: str,
        codec: Codec[T],
        subscribers: Subscribers[T],
        settlement: Settlement,
        stack: MiddlewareStack,
        clock: Clock,
        max_dequeue_count: int,
        payload_store: PayloadStore | None,
        limits: DecodingLimits,
        record_handler_time: Callable[[int, float], None] | None = None,
        max_hop_s: int = MAX_VISIBILITY_TIMEOUT_S,
        queue_of: Callable[[str], str] | None = None,
        time_limits: TimeLimits | None = None,
        key_of: KeyFunction[T] | None = None,
        deferrals: Deferrals | None = None,
    ) -> None:
        self.queue_name = queue_name
        self.queue_of = queue_of
        """The queue a message came from, by its id, for a listener on several queues."""
        self.codec = codec
        self.subscribers = subscribers
        self.settlement = settlement
        self.stack = stack
        self.clock = clock
        self.max_dequeue_count = max_dequeue_count
        self.payload_store = payload_store
        self.limits = limits
        self.record_handler_time = record_handler_time
        """Told (1 message, seconds) the observers took on each message, settlement excluded."""
        self.hops = DelayHops(settlement, clock=clock, max_hop_s=max_hop_s)
        self.time_limits = time_limits
        """Times the observers' calls for each message
        (``cloudqueue.listener.consumer.time_limits``)."""
        self.key_of = key_of
        self.deferrals = deferrals
        self.leases: LeaseKeeper | None = None
        """Writes what a handler reports to its message (``current_envelope().progress``)."""

    def process(self, lease: Lease) -> None:
        """Read, decode, hand through the middleware to every observer, and settle the message.

        The middleware wrap the handling -- or, for a message that cannot be handled, its early
        settlement -- so every message is seen (and traced) alike."""
        message, stack = lease.message, self.stack
        queue = self.queue_name if self.queue_of is None else self.queue_of(message.id)
        # bind/reset rather than the bound_contextvars() context manager: a third of the cost,
        # and this runs once per message.
        tokens = structlog.contextvars.bind_contextvars(
            queue=queue, message_id=message.id, dequeue_count=message.dequeue_count
        )
        try:
            reading = self._read(lease)
            context: MessageContext[T] = MessageContext(
                queue, message, [], reading.envelope, message.dequeue_count
            )
            early, texts = self._prepare(lease, reading, context)
            step = partial(self._deliver, lease, context, texts) if early is None else early
            if stack.wraps:
                if self.deferrals is not None:
                    context.deferrer = partial(self._defer, lease)
                stack.handle(context, step)
            else:
                step()
            if lease.abandoned:  # its time limit settled it while the handler ran on
                return
            if context.outcome is None:  # handled, or a middleware decided or failed
                self.settlement.handled(lease, context, texts)
            if stack.watches_settlement:
                stack.emit("after_settle", context)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    def abandon(self, lease: Lease, context: MessageContext[T], error: str) -> None:
        """Settle a message whose handler ran past its time limit, from the time limits' thread:
        a failed delivery with reason ``time_limit`` (retried, or poisoned at the last one)."""
        tokens = structlog.contextvars.bind_contextvars(
            queue=self.queue_name, message_id=lease.message.id
        )
        try:
            self.settlement.failed(lease, context, error, reason="time_limit")
            if self.stack.watches_settlement:
                self.stack.emit("after_settle", context)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    def release(self, leases: list[Lease]) -> None:
        """Make fetched-but-unstarted messages visible again so others need not wait for them."""
        self.settlement.release(leases)

    def _read(self, lease: Lease) -> _Reading:
        """Parse the message's envelope within the depth limit; never raises (``_open`` settles
        a message that could not be parsed)."""
        try:
            envelope = parse_envelope(
                lease.message.content, max_json_depth=self.limits.max_json_depth
            )
        except Exception as failure:  # settled by _open, as any failure to open a message
            return _Reading(None, failure)
        return _Reading(envelope)

    def _prepare(
        self, lease: Lease, reading: _Reading, context: MessageContext[T]
    ) -> tuple[Callable[[], None] | None, list[str]]:
        """Open the message and fill the context; or the settlement it gets instead of handling
        (lost, owed to the poison queue, delivered too often, undecodable, a duplicate)."""
        settlement, message, envelope = self.settlement, lease.message, reading.envelope
        early: Callable[[], None] | None = None
        if lease.lost:
            early = partial(self._lost, context)
        elif settlement.poison_mover.pending(message) is not None:  # an earlier move failed
            early = partial(settlement.move_pending, lease, context)
        elif message.dequeue_count > self.max_dequeue_count:
            early = partial(settlement.overdue, lease, context)
        elif envelope is not None and envelope.due is not None and self.hops.not_due(envelope.due):
            early = partial(self.hops.hop, lease, context, envelope)
        if early is not None:
            return early, []
        try:
            contents, items = self._open(lease, reading, context.queue_name)
        except Exception as failure:
            return partial(self._unopened, lease, context, failure), []
        context.items, context.payload_name = items, contents.payload_name
        context.attempts = contents.attempts
        context.deliveries = contents.attempts + message.dequeue_count
        if reading.envelope is not None and reading.envelope.key is not None:
            context.key = reading.envelope.key
        elif self.key_of is not None and items:
            try:
                context.key = worker_key(self.key_of, items)
            except Exception as failure:  # a bug in the worker's key: every delivery would fail
                error = f"{type(failure).__name__}: {failure}"
                return partial(settlement.poison, lease, context, "key_failed", error), []
        if contents.handled:
            early = partial(settlement.drop_duplicate, lease, context)
        elif context.deliveries > self.max_dequeue_count:
            early = partial(settlement.overdue, lease, context)
        else:
            context.deliverable = True
        return early, contents.texts

    def _defer(
        self, lease: Lease, context: MessageContext[T], resume_after_s: float | None
    ) -> Resume:
        assert self.deferrals is not None  # set only with deferrals
        return self.deferrals.defer(lease, resume_after_s)

    def _lost(self, context: MessageContext[T]) -> None:
        log.warning("message_skipped", reason="lease_lost")  # another consumer owns it now
        context.outcome = Outcome("left", "lease_lost")

    def _open(
        self, lease: Lease, reading: _Reading, queue_name: str
    ) -> tuple[MessageContents, list[T]]:
        """The message's contents and decoded items (raises what ``_unopened`` settles)."""
        if reading.error is not None:
            raise reading.error
        contents = open_envelope(
            lease.message.content,
            reading.envelope,
            self.payload_store,
            limits=self.limits,
            queue_name=queue_name,
        )
        max_values = self.limits.max_json_values_per_message
        return contents, decode_items(self.codec, contents.texts, max_values)

    def _unopened(self, lease: Lease, context: MessageContext[T], failure: Exception) -> None:
        """Settle a message that could not be opened: poisoned at once when it never can be,
        else retried like a failed delivery (an unreachable payload store, a codec bug)."""
        if isinstance(failure, DecodeError | PayloadNotFoundError):
            reason = next(name for kind, name in POISON_REASONS if isinstance(failure, kind))
            self.settlement.poison(lease, context, reason, str(failure))
            return
        if not isinstance(failure, StorageError):
            # A codec or store bug must not end the dequeue thread: retried, then poisoned.
            log.error("message_open_failed", exc_info=failure)
        self.settlement.failed(lease, context, describe_errors([failure]))

    def _deliver(self, lease: Lease, context: MessageContext[T], texts: list[str]) -> None:
        """Give every item to every observer (under the time limit, if any)."""
        held = self._held(lease, context)
        set_current_message(context.queue_name, context.message, context.key, held)
        started = self.clock.monotonic() if self.record_handler_time is not None else 0.0
        try:
            if self.time_limits is None:
                self._hand_over(context, texts)
            else:
                self.time_limits.run(lease, context, partial(self._hand_over, context, texts))
        finally:
            if held is not None:  # an async handler's checkpoint may still be on its way
                held.written()
            set_current_message(None)
            if self.record_handler_time is not None:
                self.record_handler_time(1, self.clock.monotonic() - started)

    def _held(self, lease: Lease, context: MessageContext[T]) -> HeldMessage | None:
        """What the handler may write to its message (``consumer.reporting``)."""
        if self.leases is None:
            return None
        return HeldMessage(lease, self.leases, context, self.payload_store)

    def _hand_over(self, context: MessageContext[T], texts: list[str]) -> None:
        """Give every item to every observer; record the items any observer failed on."""
        subscribers, items = self.subscribers, context.items
        failed: list[ItemFailure] = []
        if subscribers.batches is None:
            for position, (text, item) in enumerate(zip(texts, items, strict=True)):
                if failures := subscribers.deliver(item):
                    failed.append(ItemFailure(position, text, label(item), failures))
        else:  # a batch handler takes all the message's items at once
            each = subscribers.deliver_all(items, context.message_id)
            for position, failures in enumerate(each):
                if failures:
                    text, item = texts[position], items[position]
                    failed.append(ItemFailure(position, text, label(item), failures))
        context.failures = failed
        context.handled = True


__all__ = ["KeyFunction", "MessageProcessor", "decode_items", "worker_key"]
