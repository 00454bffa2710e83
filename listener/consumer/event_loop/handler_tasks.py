"""The event-loop consumer's handler tasks: each held message started, settled, or given back.

At most ``max_threads x concurrency`` handlers run at once, and a get waits until there are free
slots for all it asks (``event_loop.slots``): every message held is being handled, none waits
hidden for a slot. A message is started after the ``before_handle`` hooks, in its dequeue task
(a rate limit waits there, holding that task back), and handled in a task of its own
(``event_loop.handling``); one a middleware defers (a busy key) stays held out of its slot until
resumed (``event_loop.deferrals``).

At stop, messages not yet started are released at once (visible again), handlers get the grace
to finish, and the ones still running then are cancelled: their messages reappear after their
timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from cloudqueue.listener.consumer.event_loop.counters import AsyncCounters
from cloudqueue.listener.consumer.event_loop.handling import AsyncHandling
from cloudqueue.listener.consumer.event_loop.leases import AsyncLeases, HeldMessage
from cloudqueue.listener.consumer.event_loop.slots import HandlerSlots
from cloudqueue.listener.consumer.event_loop.stack import AsyncMiddlewareStack
from cloudqueue.listener.consumer.throughput import ThroughputMeter

log = structlog.get_logger(__name__)


class HandlerTasks:
    """The running handlers of one consumer, each holding a slot while it handles."""

    def __init__(
        self,
        handling: AsyncHandling[Any],
        *,
        stack: AsyncMiddlewareStack,
        leases: AsyncLeases,
        slots: HandlerSlots,
        counters: AsyncCounters,
        latency: ThroughputMeter,
        stopping: asyncio.Event,
    ) -> None:
        self.handling, self.stack, self.leases = handling, stack, leases
        self.slots, self.counters, self.latency = slots, counters, latency
        self._stopping = stopping
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def start(self, held: list[HeldMessage]) -> None:
        """Start a handler for each (their slots were reserved before the get), each after
        the ``before_handle`` hooks (a rate limit waits there, holding this task back)."""
        for position, one in enumerate(held):
            if self.stack.gates:
                await self.stack.emit("before_handle", one.message)
            if self._stopping.is_set():  # stopped while the get or a wait was on its way
                await self._release(held[position:])
                return
            self.counters.in_flight += 1
            task = asyncio.create_task(self._settle(one))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def drain(self, grace_s: float, queue_name: str) -> int:
        """Wait ``grace_s`` for the running handlers, then cancel the rest: how many."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        late = set(self._tasks)
        for task in late:
            task.cancel()  # its message reappears after its visibility timeout
        if late:
            log.warning("handlers_cancelled_at_stop", queue=queue_name, count=len(late))
            await asyncio.wait(late)
        return len(late)

    async def _release(self, unstarted: list[HeldMessage]) -> None:
        """Give back messages not started: visible again now, their slots free."""
        for one in unstarted:
            await self.leases.release(one)
            self.slots.give_back(1)

    async def _settle(self, held: HeldMessage) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        in_slot = True
        try:
            deferral = await self.handling.handle(held)
            while deferral is not None:  # held, out of its slot, until resumed
                in_slot = False
                self.counters.in_flight -= 1
                async with self.slots.out_of_slot():
                    await deferral.wait(self._stopping)
                in_slot = True
                self.counters.in_flight += 1
                if self._stopping.is_set():  # a stop releases a deferred message
                    await self.leases.release(held)
                    return
                started = loop.time()  # its wait is no handling time
                deferral = await self.handling.handle(held)
        finally:
            self.leases.end(held)
            if in_slot:
                self.counters.in_flight -= 1
                self.slots.give_back(1)
            self.latency.record(1, loop.time() - started)
