"""One message on the event loop: opened, handed through the middleware to its ``async def``
handler under its time limit, settled, and its outcome shown to the middleware.

The event-loop consumer's counterpart of ``processing``. The message's text is parsed once into
a ``MessageContext`` (its envelope, items, and key: the one it carries, else the worker's
``key(item)``), which the middleware see as on the threaded path; innermost in their chain
(``event_loop.stack``), the step either hands the items to the handler, one after the other (a
publisher's batch: each item, the failed ones noted, so that only they are retried), or -- for a
message that cannot be opened, a duplicate, a key that fails -- settles it instead, so every
message is seen (and traced) alike. After the chain the message is settled by what the
middleware decided (``event_loop.settling``) -- unless one deferred it
(``event_loop.deferrals``: it stays held, outcome ``deferred``) -- then ``after_settle`` sees the
outcome.

Items kept in the payload store (a large item's claim check, ``wire.payload``) are fetched and
decoded on a worker thread, as their payload is retired after the delete (``event_loop.settling``):
the store is sync, and such messages are rare; an inline message makes no such hop. A payload
that is a tombstone makes the message a duplicate of done work: it is dropped, as on threads.

What the handler writes to its message through ``current_envelope()`` (progress, checkpoints)
goes through ``event_loop.reporting``; the checkpoints it saved are written before its message is
settled, and one kept in the payload store is read for it on a worker thread before it starts.

A handler past ``time_limit_s`` is cancelled (``asyncio.timeout``) and its message settled at
once, inside the chain, as a failed delivery with reason ``time_limit`` (the threaded path's
time limits settle it from their own thread likewise): the middleware around it find
``context.outcome`` set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Generic, TypeVar

from cloudqueue.listener.consumer.current import set_current_message
from cloudqueue.listener.consumer.event_loop.deferrals import Deferral, Deferrals
from cloudqueue.listener.consumer.event_loop.hops import AsyncDelayHops
from cloudqueue.listener.consumer.event_loop.leases import AsyncLeases, HeldMessage
from cloudqueue.listener.consumer.event_loop.reporting import LoopNotes
from cloudqueue.listener.consumer.event_loop.settling import AsyncSettler
from cloudqueue.listener.consumer.event_loop.stack import AsyncMiddlewareStack
from cloudqueue.listener.consumer.item_failures import ItemFailure, label
from cloudqueue.listener.consumer.middleware import MessageContext, Outcome
from cloudqueue.listener.consumer.processing import KeyFunction, decode_items, worker_key
from cloudqueue.listener.wire.codec import Codec
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS, DecodingLimits
from cloudqueue.listener.wire.payload import MessageContents, open_envelope

T = TypeVar("T")

TIME_LIMIT = "time_limit"

Step = Callable[[], Coroutine[Any, Any, None]]
"""What the middleware wrap for one message: handing its items over, or settling it instead."""

Fetched = tuple[MessageContents, list[T]]
"""A stored payload's contents and its decoded items (``AsyncHandling._fetch``)."""


class AsyncHandling(Generic[T]):
    """Takes each message of one queue through its middleware and handler, then settles it."""

    def __init__(
        self,
        settler: AsyncSettler,
        stack: AsyncMiddlewareStack,
        handler: Callable[[T], Awaitable[None]],
        codec: Codec[T],
        leases: AsyncLeases,
        *,
        time_limit_s: float = 0.0,
        limits: DecodingLimits = DEFAULT_LIMITS,
        key: KeyFunction[T] | None = None,
    ) -> None:
        self.settler, self.stack, self.leases = settler, stack, leases
        self.handler, self.codec = handler, codec
        self.time_limit_s, self.limits = time_limit_s, limits
        self.payload_store = settler.payload_store
        self.key_of = key
        """The worker's key of an item, for a message that carries none (``worker_key``)."""
        self.queue_name = settler.queue_name
        self.queue_of = settler.queue_of
        """The queue a message came from, for a consumer of several (None: ``queue_name``)."""
        self._deferrals = Deferrals()
        self.hops = AsyncDelayHops(settler)
        self._settles_on_loop = stack.settles_on_loop()

    async def handle(self, held: HeldMessage) -> Deferral | None:
        """Open, handle (through the middleware) and settle one held message (renewed
        meanwhile: the settlement uses its newest receipt, with no renewal on its way); or,
        when a middleware deferred it, leave it unsettled and return the wait for its resume
        (``event_loop.deferrals``)."""
        message, stack = held.message, self.stack
        queue = self.queue_name if self.queue_of is None else self.queue_of(message.id)
        context: MessageContext[T] = MessageContext(queue, message, [], None, message.dequeue_count)
        deliver = self._prepare(held, context)
        if deliver is None:  # its items are in the payload store (large ones: rare)
            deliver = await self._prepare_stored(held, context)
        if stack.wraps:
            context.deferrer = self._deferrals.deferrer(asyncio.get_running_loop())
            await stack.handle(context, deliver)
        else:
            await deliver()
        deferral = self._deferrals.take(message.id) if stack.wraps else None
        decision = context.decision
        if context.outcome is not None:  # settled inside the chain (unopened, time limit)
            deferral = None
        elif decision is not None and decision.kind == "defer":  # still held: not settled
            context.outcome = Outcome("deferred", decision.reason)
        else:  # handled, or a middleware decided or failed
            deferral = None
            async with held.settling:
                context.outcome = await self.settler.settle(held, context)
        if not stack.watches_settlement:
            return deferral
        if self._settles_on_loop:  # the failure logs alone, as a rule: no coroutine for them
            stack.call("after_settle", context)
        else:
            await stack.emit("after_settle", context)
        return deferral

    def _prepare(
        self,
        held: HeldMessage,
        context: MessageContext[T],
        fetched: Fetched[T] | None = None,
    ) -> Step | None:
        """Open the message and fill the context (as the threaded ``Processor`` prepares it);
        the step the middleware wrap: handing the items over, or the settlement it gets instead
        (delivered too often, unopened, a bad key, a duplicate). None when its items are in the
        payload store and not yet ``fetched``: no storage call is made on the loop."""
        if context.message.dequeue_count > self.settler.delivery.max_dequeue_count:
            # Its workers died on it each time (never settled): not handed out again, as on threads.
            return partial(self._overdue, held, context)
        return self._opened(held, context, fetched)

    def _opened(
        self, held: HeldMessage, context: MessageContext[T], fetched: Fetched[T] | None
    ) -> Step | None:
        """``_prepare`` for a message not delivered too often."""
        try:
            if fetched is None:
                contents = self._open(context)
                if self.hops.not_due(context):  # delayed beyond 7 days: hidden again, unopened
                    return partial(self._hop, held, context)
                if contents is None:
                    return None
                context.items = [self.codec.decode(text) for text in contents.texts]
            else:
                contents, context.items = fetched
        except Exception as unopened:  # poisoned with the reason, or retried (``unopened``)
            return partial(self._unopened, held, context, unopened)
        context.payload_name = contents.payload_name
        # A re-published batch's items were delivered in earlier messages too: counted.
        context.attempts = contents.attempts
        context.deliveries = contents.attempts + context.message.dequeue_count
        instead = self._key(held, context) or self._not_handled(held, context, contents)
        if instead is not None:
            return instead
        context.deliverable = True
        return partial(self._deliver, held, context, contents.texts)

    def _not_handled(
        self, held: HeldMessage, context: MessageContext[T], contents: MessageContents
    ) -> Step | None:
        """The settlement an opened message gets instead of its handler: a duplicate of done
        work dropped, or poisoned when its items' deliveries (earlier messages' too) are past
        the limit; None to hand it over."""
        if contents.handled:
            return partial(self._drop_duplicate, held, context)
        if context.deliveries > self.settler.delivery.max_dequeue_count:
            return partial(self._overdue, held, context)
        return None

    def _key(self, held: HeldMessage, context: MessageContext[T]) -> Step | None:
        """Give the context its key (the envelope's, else the worker's ``key(item)``); the
        poisoning step when the worker's key raises (a bug in it: every delivery would fail)."""
        envelope, items = context.envelope, context.items
        if envelope is not None and envelope.key is not None:
            context.key = envelope.key
        elif self.key_of is not None and items:
            try:
                context.key = worker_key(self.key_of, items)
            except Exception as failure:
                error = f"{type(failure).__name__}: {failure}"
                return partial(self._poison, held, context, "key_failed", error)
        return None

    def _open(self, context: MessageContext[T]) -> MessageContents | None:
        """Parse the envelope (packed or compressed by a ``Publisher``, within the decoding
        limits) into the context; the message's contents, or None when they are in the payload
        store (``_prepare_stored`` fetches them)."""
        content = context.message.content
        envelope = parse_envelope(content, max_json_depth=self.limits.max_json_depth)
        context.envelope = envelope
        if envelope is not None and envelope.packed is None and self.payload_store is not None:
            return None
        return open_envelope(
            content, envelope, None, limits=self.limits, queue_name=context.queue_name
        )

    async def _prepare_stored(self, held: HeldMessage, context: MessageContext[T]) -> Step:
        """``_prepare`` for a message whose items are in the payload store: fetched and decoded
        on a worker thread (the store is sync, and a payload may be megabytes: the loop's
        other handlers do not wait for it; such messages are rare)."""
        try:
            fetched = await asyncio.to_thread(self._fetch, context)
        except Exception as unopened:  # missing (poisoned), or out of reach (retried)
            return partial(self._unopened, held, context, unopened)
        step = self._prepare(held, context, fetched)
        assert step is not None  # fetched: nothing left to fetch
        return step

    def _fetch(self, context: MessageContext[T]) -> Fetched[T]:
        """The stored payload's contents and items, within the decoding limits (as on threads:
        ``max_json_values_per_message`` counted for a large payload)."""
        limits = self.limits
        contents = open_envelope(
            context.message.content,
            context.envelope,
            self.payload_store,
            limits=limits,
            queue_name=context.queue_name,
        )
        max_values = limits.max_json_values_per_message
        return contents, decode_items(self.codec, contents.texts, max_values)

    async def _unopened(
        self, held: HeldMessage, context: MessageContext[T], failure: Exception
    ) -> None:
        async with held.settling:
            context.outcome = await self.settler.unopened(held, failure)

    async def _poison(
        self, held: HeldMessage, context: MessageContext[T], reason: str, error: str
    ) -> None:
        async with held.settling:
            context.outcome = await self.settler.poison(held, reason, error)

    async def _overdue(self, held: HeldMessage, context: MessageContext[T]) -> None:
        async with held.settling:
            context.outcome = await self.settler.overdue(held, context.deliveries)

    async def _hop(self, held: HeldMessage, context: MessageContext[T]) -> None:
        async with held.settling:
            context.outcome = await self.hops.hop(held, context)

    async def _drop_duplicate(self, held: HeldMessage, context: MessageContext[T]) -> None:
        async with held.settling:
            context.outcome = await self.settler.drop_duplicate(held, context.payload_name)

    async def _deliver(
        self, held: HeldMessage, context: MessageContext[T], texts: list[str]
    ) -> None:
        """Every item to the handler in order, under one time limit for them all; the items
        it failed on are noted (``context.failures``), as the threaded path notes them."""
        limit = asyncio.timeout(self.time_limit_s or None)
        notes = await self._notes(held, context)
        # For current_envelope(): a context variable of this task, which runs the handler.
        set_current_message(context.queue_name, context.message, context.key, notes)
        try:
            try:
                async with limit:
                    context.failures = await self._hand_over(context.items, texts, limit)
            finally:
                if notes.writing is not None:  # its checkpoints are written before it settles
                    await notes.written()
        except TimeoutError:  # the limit's: a handler's own TimeoutError is its item's failure
            async with held.settling:
                context.outcome = await self.settler.failed(
                    held,
                    TimeoutError(),
                    reason=TIME_LIMIT,
                    error="time limit exceeded",
                    deliveries=context.deliveries,
                )
            return
        finally:
            set_current_message(None)
        context.handled = True

    async def _notes(self, held: HeldMessage, context: MessageContext[T]) -> LoopNotes:
        """What the handler may write to its message (``event_loop.reporting``), its checkpoint
        read already when it is kept in the payload store."""
        notes = LoopNotes(held, self.leases, context, self.payload_store, self.settler.clock)
        if notes.stored_checkpoint_name() is not None:  # rare: read on a worker thread
            await notes.load()
        return notes

    async def _hand_over(
        self, items: list[T], texts: list[str], limit: asyncio.Timeout
    ) -> list[ItemFailure]:
        """Hand each item to the handler; the ones it raised on."""
        failed: list[ItemFailure] = []
        for position, item in enumerate(items):
            try:
                await self.handler(item)
            except Exception as raised:
                if limit.expired():  # the limit's cancellation, turned into another error
                    raise TimeoutError from raised
                failed.append(ItemFailure(position, texts[position], label(item), [raised]))
        return failed


__all__ = ["AsyncHandling"]
