"""An event loop on a thread of its own, for the coroutines of threaded code.

The dequeue loop and the handlers run on threads. An ``async def`` handler or middleware hook
returns a coroutine; the thread that got it submits it here and waits for its outcome, so the
rest of the listener treats it as a plain call. Every coroutine submitted to one ``LoopThread``
shares its loop, which is why a handler may keep one ``aiohttp`` session or database pool for all
its messages. The loop starts with the first coroutine, so code without any costs no thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

R = TypeVar("R")


class LoopThread:
    """Runs awaitables on one event loop on a daemon thread, started on first use."""

    def __init__(
        self,
        name: str,
        *,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        self._name = name
        self._loop_factory = loop_factory
        """Makes the loop: a test's runs on virtual time (``cloudqueue.listener.virtual_loop``)."""
        self.awaiting = 0
        """Submitted awaitables started on the loop and not yet done (changed on the loop only)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, awaitable: Awaitable[R]) -> R:
        """Run ``awaitable`` on the loop and wait for its result (or its exception)."""
        return self.submit(awaitable).result()

    def submit(self, awaitable: Awaitable[R]) -> concurrent.futures.Future[R]:
        """Schedule ``awaitable`` on the loop; its future, to wait on or cancel."""
        loop = self._running_loop()
        if threading.current_thread() is self._thread:
            raise RuntimeError("a coroutine on the listener's loop cannot wait for another there")
        return asyncio.run_coroutine_threadsafe(self._counted(awaitable), loop)

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Schedule a plain function on the loop from any thread, without waiting for it."""
        self._running_loop().call_soon_threadsafe(callback)

    @property
    def started(self) -> bool:
        return self._loop is not None

    def cancel_pending(self) -> None:
        """Cancel what is still awaiting (a stop that ran out of grace), keeping the loop: a
        worker's async ``shutdown`` then runs on it with no handler left using what it closes."""
        with self._lock:
            loop = self._loop
        if loop is not None:
            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result()

    def close(self) -> None:
        """Cancel what is still awaiting, stop the loop and join its thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop, self._thread = None, None
        if loop is None or thread is None:
            return
        # Coroutines still awaiting (a stop that ran out of grace) are cancelled, so the threads
        # waiting for them see a failure -- the message is retried -- instead of waiting forever.
        asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result()
        asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = self._loop_factory()
                self._thread = threading.Thread(
                    target=loop.run_forever, name=self._name, daemon=True
                )
                self._thread.start()
                self._loop = loop
            return self._loop

    async def _counted(self, awaitable: Awaitable[R]) -> R:
        self.awaiting += 1
        try:
            return await awaitable
        finally:
            self.awaiting -= 1

    def __repr__(self) -> str:
        return f"LoopThread({self._name!r}, running={self._loop is not None})"


async def _cancel_all() -> None:
    current = asyncio.current_task()
    pending = [task for task in asyncio.all_tasks() if task is not current]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


__all__ = ["LoopThread"]
