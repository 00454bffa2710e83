"""Running ``async def`` handlers: every message's coroutine on one event loop per worker.

The loop runs on a thread of its own, started with the first awaitable. A thread handling a
message (a dequeue thread, or a handler thread when ``listener.concurrency`` > 1) submits the
handler's coroutine there and waits for its outcome, so the listener settles the message exactly
as for a plain function -- deleted when it returned, retried when it raised. Many messages in
flight are many coroutines awaiting concurrently on that one loop, which is also why a handler may
keep one ``aiohttp`` session or database pool for all its messages: they all share this loop.
``close()`` stops the loop once the listener has stopped.
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self, item: Any) -> None:
        result = self._handler(item)
        if inspect.isawaitable(result):
            future = asyncio.run_coroutine_threadsafe(_as_coroutine(result), self._running_loop())
            future.result()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=loop.run_forever, name="cloudqueue:async-handlers", daemon=True
                )
                self._thread.start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Stop and close the loop (call after the listener's threads have exited)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop, self._thread = None, None
        if loop is None or thread is None:
            return
        # Handlers still awaiting (a stop that ran out of grace) are cancelled, so the threads
        # waiting for them see a failure -- the message is retried -- instead of waiting forever.
        asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result()
        asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def __repr__(self) -> str:
        return f"AsyncHandlerRunner({self._handler!r}, running={self._loop is not None})"


async def _cancel_all() -> None:
    current = asyncio.current_task()
    pending = [task for task in asyncio.all_tasks() if task is not current]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def _as_coroutine(awaitable: Awaitable[None]) -> None:
    await awaitable
