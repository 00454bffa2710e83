"""The in-flight bound of the event-loop consumer: handler slots, reserved before each get.

At most ``capacity`` messages are held and handled at once. A dequeue task reserves slots for
all the messages it asks for *before* its get, so no get asks for a message no slot is free for
(it would wait hidden, its visibility renewed, while another consumer could take it); what the
get did not fill is given back at once, and each message's slot when it is settled.

A message a middleware deferred gives its slot back while it waits (the messages behind it flow)
and takes one again when resumed. At ``MAX_DEFERRED`` held so, no get reserves any: a key with a
long backlog must not make the consumer hold the whole queue (``deferrals``' bound).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from cloudqueue.listener.consumer.deferrals import MAX_DEFERRED


class HandlerSlots:
    """Slots spoken for (held messages, gets on their way) against the in-flight bound."""

    def __init__(self, capacity: int, stopping: asyncio.Event) -> None:
        self.capacity = capacity
        self.taken = 0
        self.deferred = 0
        """Messages a middleware deferred, held out of their slots until resumed."""
        self._stopping = stopping
        self._freed = asyncio.Event()
        """Set when enough slots are free for what a waiting task wants."""
        self._waiting_for = 1
        """The room the waiting tasks want (one batch, or what ``fetch_size`` asks): waking them
        for every single free slot would cost a wake-up per task per message and a get of one
        message each."""

    async def reserve(self, wanted: int) -> int:
        """Reserve ``wanted`` slots (at most all), waiting until that many are free, as a
        hand-written loop waits for its batch to finish; 0 once stopping."""
        enough = min(wanted, self.capacity)
        while not self._stopping.is_set():
            if self.capacity - self.taken >= enough and self.deferred < MAX_DEFERRED:
                self.taken += enough
                return enough
            self._waiting_for = enough
            self._freed.clear()
            await self._freed.wait()
        return 0

    def give_back(self, slots: int) -> None:
        """Free slots, waking the waiting tasks once their get fits: from a settled message,
        and from a get that came back short -- without the latter, tasks waiting while every get
        came back empty (its messages hidden by a get whose answer was lost) would wait for a
        settlement that never comes."""
        self.taken -= slots
        if self.capacity - self.taken >= self._waiting_for:
            self._freed.set()

    @contextlib.asynccontextmanager
    async def out_of_slot(self) -> AsyncIterator[None]:
        """While a deferred message waits inside: its slot given back; after, a slot again (when
        one is free; at once when stopping: it is only released then). Cancelled inside or while
        waiting for the slot, it holds none."""
        self.deferred += 1
        self.give_back(1)
        try:
            yield
        finally:
            self.deferred -= 1
        await self._take_one()

    async def _take_one(self) -> None:
        while not self._stopping.is_set() and self.capacity - self.taken < 1:
            self._waiting_for = 1  # the dequeue tasks woken with it set theirs again
            self._freed.clear()
            await self._freed.wait()
        self.taken += 1
        if self.deferred < MAX_DEFERRED:
            self._freed.set()  # a get held back by the deferred messages may go (if it fits)

    def wake(self) -> None:
        """Wake every waiting task (a stop: they see it and give up)."""
        self._freed.set()

    def __repr__(self) -> str:
        return f"HandlerSlots(taken={self.taken}/{self.capacity}, deferred={self.deferred})"


__all__ = ["HandlerSlots"]
