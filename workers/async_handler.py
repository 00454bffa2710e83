"""Running ``async def`` handlers from dequeue threads.

Each dequeue thread gets its own event loop, created on its first item and reused for the next
ones, so a handler's awaits run concurrently with nothing else on that loop and need no locking
against other threads' loops. ``close()`` closes every loop once the listener has stopped.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class AsyncHandlerRunner:
    """Wraps a handler that may return an awaitable into a plain function for Rx observers."""

    def __init__(self, handler: Callable[[T], Awaitable[None] | None]) -> None:
        self._handler: Callable[[Any], Awaitable[None] | None] = handler
        self._local = threading.local()
        self._loops: list[asyncio.AbstractEventLoop] = []
        self._lock = threading.Lock()

    def __call__(self, item: Any) -> None:
        result = self._handler(item)
        if inspect.isawaitable(result):
            self._loop().run_until_complete(_as_coroutine(result))

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop | None = getattr(self._local, "loop", None)
        if loop is None:
            loop = asyncio.new_event_loop()
            self._local.loop = loop
            with self._lock:
                self._loops.append(loop)
        return loop

    def close(self) -> None:
        """Close every loop (call after the listener's threads have exited)."""
        with self._lock:
            loops, self._loops = self._loops, []
        for loop in loops:
            if not loop.is_running():
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

    def __repr__(self) -> str:
        return f"AsyncHandlerRunner({self._handler!r}, loops={len(self._loops)})"


async def _as_coroutine(awaitable: Awaitable[None]) -> None:
    await awaitable
