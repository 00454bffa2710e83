"""Running ``async def`` handlers: every message's coroutine on one event loop per worker.

The loop runs on a thread of its own (``cloudqueue.listener.consumer.coroutines.LoopThread``),
started with the first awaitable. A thread handling a message (a dequeue thread, or a handler thread
when ``listener.concurrency`` > 1) submits the handler's coroutine there and waits for its outcome,
so the listener settles the message exactly as for a plain function -- deleted when it returned,
retried when it raised. Many messages in flight are many coroutines awaiting concurrently on that
one loop, which is also why a handler may keep one ``aiohttp`` session or database pool for all
its messages: they all share this loop, as do the worker's async middleware. ``close()`` stops the
loop once the listener has stopped.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.time_limits import wait_within_limit

T = TypeVar("T")


class AsyncHandlerRunner:
    """Wraps a handler that may return an awaitable into a plain function for Rx observers."""

    def __init__(
        self,
        handler: Callable[[T], Awaitable[Any] | Any],
        *,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        self._handler: Callable[[Any], Awaitable[Any] | Any] = handler
        self.loop = LoopThread("cloudqueue:async-handlers", loop_factory=loop_factory)
        """The worker's event loop: its async handlers' and its async middleware's."""

    def __call__(self, item: Any) -> Any:
        """Handle ``item``; what the handler returned (awaited, for a coroutine): a worker
        that keeps results stores it (``cloudqueue.listener.workflows.keep_results``), a chain
        step sends it on."""
        result: Any = self._handler(item)
        if inspect.isawaitable(result):
            # Cancelled at the listener's time limit, if it has one.
            return wait_within_limit(self.loop.submit(result))
        return result

    def close(self) -> None:
        """Stop and close the loop (call after the listener's threads have exited)."""
        self.loop.close()

    def __repr__(self) -> str:
        return f"AsyncHandlerRunner({self._handler!r}, running={self.loop.started})"
