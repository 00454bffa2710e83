"""A message deferred on the event loop: held, out of its handler slot, until it is resumed.

The event-loop consumer's counterpart of ``deferrals``. A middleware that cannot let a message
go on now (a busy key: ``PerKeyLimit``, ``KeyedHandling``) calls ``context.defer``; the message
is not settled, its lease stays held (renewed as any), and its task gives its handler slot back
and waits -- for the ``Resume`` the middleware got (callable from any thread, once: the key's
gate calls it from the thread that leaves the key), for ``resume_after_s``, or for a stop. Then
it takes a slot again and is handled anew, with no delivery counted; at a stop it is released to
the queue instead (``AsyncConsumer``).
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial
from typing import Any

from cloudqueue.listener.consumer.middleware import Deferrer, MessageContext, Resume


class Deferrals:
    """The deferrals of one consumer's messages, made as middleware defer them."""

    def __init__(self) -> None:
        self._made: dict[str, Deferral] = {}

    def deferrer(self, loop: asyncio.AbstractEventLoop) -> Deferrer:
        """What a context defers its message with (``MessageContext.deferrer``; maybe called
        on a worker thread): nothing is made for the messages never deferred."""
        return partial(self._park, loop)

    def take(self, message_id: str) -> Deferral | None:
        """The deferral made for this handling of the message, if any (once)."""
        return self._made.pop(message_id, None)

    def _park(
        self, loop: asyncio.AbstractEventLoop, context: MessageContext[Any], after_s: float | None
    ) -> Resume:
        deferral = Deferral(loop, after_s)
        self._made[context.message_id] = deferral
        return deferral.resume


class Deferral:
    """One handling's deferral of its message, and the wait for its resume (a fresh one each
    time the message is deferred: a late ``resume`` of an earlier one wakes nothing)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, resume_after_s: float | None) -> None:
        self._loop = loop
        self._resumed = asyncio.Event()
        self.resume_after_s = resume_after_s

    def resume(self) -> None:
        """Put the message back in line (from any thread; again: nothing)."""
        with contextlib.suppress(RuntimeError):  # the loop closed: the message was released
            self._loop.call_soon_threadsafe(self._resumed.set)

    async def wait(self, stopping: asyncio.Event) -> None:
        """Until resumed (maybe already), ``resume_after_s`` passed, or stopping."""
        waits = {
            asyncio.ensure_future(self._resumed.wait()),
            asyncio.ensure_future(stopping.wait()),
        }
        try:
            await asyncio.wait(waits, timeout=self.resume_after_s, return_when="FIRST_COMPLETED")
        finally:
            for waiting in waits:
                waiting.cancel()


__all__ = ["Deferral", "Deferrals"]
