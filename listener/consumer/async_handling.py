"""One message on the event loop: opened, handed through the middleware to its ``async def``
handler under its time limit, settled, and its outcome shown to the middleware.

The event-loop consumer's counterpart of ``processing``. The message's text is parsed once into
a ``MessageContext`` (its envelope, items and carried key), which the middleware see as on the
threaded path; innermost in their chain (``async_stack``), ``deliver`` either hands the items to
the handler, one after the other (a publisher's batch: all or none), or -- for a message that
cannot be opened -- poisons it, so every message is seen (and traced) alike. After the chain the
message is settled by what the middleware decided (``async_settling``) -- unless one deferred it
(``async_deferrals``: it stays held, outcome ``deferred``) -- then ``after_settle`` sees the
outcome.

A handler past ``time_limit_s`` is cancelled (``asyncio.timeout``) and its message settled at
once, inside the chain, as a failed delivery with reason ``time_limit`` (the threaded path's
time limits settle it from their own thread likewise): the middleware around it find
``context.outcome`` set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Generic, TypeVar

from cloudqueue.listener.consumer.async_deferrals import Deferral, Deferrals
from cloudqueue.listener.consumer.async_leases import HeldMessage
from cloudqueue.listener.consumer.async_settling import AsyncSettler
from cloudqueue.listener.consumer.async_stack import AsyncMiddlewareStack
from cloudqueue.listener.consumer.current import set_current_message
from cloudqueue.listener.consumer.item_failures import ItemFailure, label
from cloudqueue.listener.consumer.middleware import MessageContext, Outcome
from cloudqueue.listener.wire.codec import Codec
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS, DecodingLimits
from cloudqueue.listener.wire.payload import open_envelope

T = TypeVar("T")

TIME_LIMIT = "time_limit"


class AsyncHandling(Generic[T]):
    """Takes each message of one queue through its middleware and handler, then settles it."""

    def __init__(
        self,
        settler: AsyncSettler,
        stack: AsyncMiddlewareStack,
        handler: Callable[[T], Awaitable[None]],
        codec: Codec[T],
        *,
        time_limit_s: float = 0.0,
        limits: DecodingLimits = DEFAULT_LIMITS,
    ) -> None:
        self.settler, self.stack = settler, stack
        self.handler, self.codec = handler, codec
        self.time_limit_s, self.limits = time_limit_s, limits
        self.queue_name = settler.queue_name
        self._deferrals = Deferrals()
        self._settles_on_loop = stack.settles_on_loop()

    async def handle(self, held: HeldMessage) -> Deferral | None:
        """Open, handle (through the middleware) and settle one held message (renewed
        meanwhile: the settlement uses its newest receipt, with no renewal on its way); or,
        when a middleware deferred it, leave it unsettled and return the wait for its resume
        (``async_deferrals``)."""
        message, stack = held.message, self.stack
        context: MessageContext[T] = MessageContext(
            self.queue_name, message, [], None, message.dequeue_count
        )
        try:
            texts = self._open(context)
        except Exception as unopened:  # it never can be opened: poisoned with the reason
            deliver = partial(self._unopened, held, context, unopened)
        else:
            context.deliverable = True
            deliver = partial(self._deliver, held, context, texts)
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

    def _open(self, context: MessageContext[T]) -> list[str]:
        """Fill the context from the message's envelope (packed or compressed by a
        ``Publisher``, within the decoding limits, as the threaded ``Processor`` opens it);
        the items' texts."""
        content = context.message.content
        envelope = parse_envelope(content, max_json_depth=self.limits.max_json_depth)
        context.envelope = envelope
        contents = open_envelope(
            content, envelope, None, limits=self.limits, queue_name=self.queue_name
        )
        context.items = [self.codec.decode(text) for text in contents.texts]
        if envelope is not None:
            context.key = envelope.key
        return contents.texts

    async def _unopened(
        self, held: HeldMessage, context: MessageContext[T], failure: Exception
    ) -> None:
        async with held.settling:
            context.outcome = await self.settler.unopened(held, failure)

    async def _deliver(
        self, held: HeldMessage, context: MessageContext[T], texts: list[str]
    ) -> None:
        """The items to the handler in order, under the time limit; the first that fails
        fails the message (``context.failures``)."""
        limit = asyncio.timeout(self.time_limit_s or None)
        items, position = context.items, 0
        # For current_envelope(): a context variable of this task, which runs the handler.
        set_current_message(context.queue_name, context.message, context.key)
        try:
            async with limit:
                while position < len(items):  # where it stops is the item that failed
                    await self.handler(items[position])
                    position += 1
        except Exception as raised:  # a handler's own TimeoutError is its failure, not the limit
            if limit.expired():
                async with held.settling:
                    context.outcome = await self.settler.failed(
                        held, raised, reason=TIME_LIMIT, error="time limit exceeded"
                    )
                return
            failed = ItemFailure(position, texts[position], label(items[position]), [raised])
            context.failures = [failed]
        finally:
            set_current_message(None)
        context.handled = True


__all__ = ["AsyncHandling"]
