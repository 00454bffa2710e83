"""The middleware seam on the event loop: the same ``Middleware`` hooks, called from the
event-loop consumer (``cloudqueue.listener.consumer.event_loop.consumer``) on its own loop.

The middleware, their order, which hooks each overrides and the one that may decide idle waits
are the threaded ``MiddlewareStack``'s (it is built here and asked); only how a hook is *called*
differs, chosen once per middleware and hook:

* an ``async def`` hook is awaited on the loop: no side loop, no thread;
* a sync hook is called on the loop. Nearly all are short (counters, logs, a span, a histogram),
  and a worker thread's round trip costs more CPU than the handling of a small message: in
  ``tests/benchmarks/bench_hook_calls.py`` (CPU per message over the consumer's without
  middleware of its own, one run on a loaded machine) a counting ``after_settle`` called on the
  loop cost nothing the run could tell apart (0.89x), on a worker thread 2.36x; a timing
  ``around_handle`` 1.09x as a generator, 0.99x as ``async def``, 3.43x as a plain one on a
  worker thread;
* the sync hooks of a middleware that says ``blocking`` (``RateLimit`` waits in
  ``before_handle``) run on a worker thread: a wait there would stall every handler on the
  loop. The threads are the stack's own (two for
  each message that may be in flight, made as needed), not the loop's shared pool, whose few
  threads a rate limit's long waits would take from the aio SDK's name lookups. A rate limit's
  wait ends at a stop, as on the threaded path (``ListenerStarted.stopping``);
* ``around_handle``: an async one awaits ``call_next()`` (the rest of the chain, then the
  handler, on the loop); a generator one (``cloudqueue.listener.consumer.wrapping``) is stepped
  on the loop -- on a worker thread for the messages it ``blocks`` on (group members, keyed
  messages) -- around an awaited rest of the chain; a
  plain one, whose ``call_next()`` must return only when the handler is done, runs on a worker
  thread, and its ``call_next()`` hands the rest of the chain back to the loop and waits for
  it. Those threads wait for handlers, so they come from a pool of the stack's own, with a
  thread for each plain middleware of each message that may be in flight (made as needed): in
  the loop's shared pool they would take every thread, and leave none for the hooks the
  handlers' chains wait for. That keeps every existing middleware right unchanged; the short
  ones (tracing, retry policy, metrics, ``run --record``) are generators, so they cost no hop,
  and so are groups and key checks (``GroupCompletion``, ``KeyedHandling``), which every hosted
  worker on a store with a ledger has: a message that is no group member, or has no key, costs
  them no hop; the ledger calls of one that is go to a worker thread (on SQLite too: its writes
  wait for the file). Results and chains (``KeepResults``, ``ChainStep``), opt-in, are generators
  that block on every message: their store writes and puts run on a worker thread.

Errors are contained as on the threaded path (``middleware_failed``): a hook's error is logged,
an ``around_handle``'s fails the delivery. A cancellation (a stop past its grace) is not
contained: it goes through the wrappers' ``yield`` and ends the message's task.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Literal, TypeVar

import structlog

from cloudqueue.listener.consumer.events import QueueEmptyDecision
from cloudqueue.listener.consumer.middleware import HOOKS, MessageContext, Middleware, overrides
from cloudqueue.listener.consumer.stack import (
    MiddlewareStack,
    check_went_on,
    contain_around_failure,
)
from cloudqueue.listener.consumer.wrapping import Wrapper, around_kind, enter, leave

log = structlog.get_logger(__name__)

R = TypeVar("R")

Way = Literal["await", "call", "thread"]
"""How a hook is called on the loop."""

GoOn = Callable[[], Coroutine[Any, Any, None]]
"""The rest of the chain on the loop: the next middleware, or the handling itself."""


class AsyncMiddlewareStack:
    """The ordered middleware of one event-loop consumer, with one way of calling each hook."""

    def __init__(
        self, middleware: Sequence[Middleware], *, queue_name: str, in_flight: int = 1
    ) -> None:
        """``in_flight``: how many messages may be handled at once (sizes the thread pool of
        plain ``around_handle`` middleware)."""
        self.queue_name = queue_name
        self._chosen = MiddlewareStack(middleware, queue_name=queue_name)  # orders, checks
        self._calls = {
            hook: tuple(_way(m, hook) for m in self._chosen.chosen(hook)) for hook in HOOKS
        }
        self._arounds = tuple((m, around_kind(m)) for m in self._chosen.chosen("around_handle"))
        self.wraps = bool(self._arounds)
        self.watches_settlement = bool(self._calls["after_settle"])
        self._on_loop_only = {
            hook: all(way == "call" for _, way in calls) for hook, calls in self._calls.items()
        }
        self.gates = bool(self._calls["before_handle"])
        plain = sum(kind == "plain" for _, kind in self._arounds)
        self._threads = _pool(in_flight * plain, f"cloudqueue:{queue_name}:around")
        """Plain ``around_handle`` calls, each waiting for the rest of its chain."""
        blocking = any(m.blocking or overrides(m, "blocks") for m in self._chosen.middleware)
        self._blocking = _pool(2 * in_flight * blocking, f"cloudqueue:{queue_name}:blocking")
        """The hooks of ``blocking`` middleware; none waits for the loop (no starving)."""

    @property
    def middleware(self) -> tuple[Middleware, ...]:
        return self._chosen.middleware

    def wants(self, hook: str) -> bool:
        return bool(self._calls[hook])

    async def emit(self, hook: str, *args: Any) -> None:
        """Call ``hook(*args)`` on each middleware that has it; errors are logged, not raised."""
        if self._on_loop_only[hook]:  # every call short and sync: no coroutine to step
            self.call(hook, *args)
            return
        for call, way in self._calls[hook]:
            try:
                if way == "call":
                    call(*args)
                elif way == "await":
                    await call(*args)
                else:
                    await self._off_loop(partial(call, *args))
            except Exception:
                log.exception("middleware_failed", queue=self.queue_name, hook=hook)

    def call(self, hook: str, *args: Any) -> None:
        """``emit`` of a hook whose every call is sync and short, made at once."""
        for call, _ in self._calls[hook]:
            try:
                call(*args)
            except Exception:
                log.exception("middleware_failed", queue=self.queue_name, hook=hook)

    def settles_on_loop(self) -> bool:
        """True when every ``after_settle`` is short and sync (``call`` them, no await)."""
        return self._on_loop_only["after_settle"]

    def queue_empty(self, *args: Any) -> QueueEmptyDecision | None:
        """The idle decision of the middleware that makes it (a pure, short call)."""
        return self._chosen.queue_empty(*args)

    async def handle(self, context: MessageContext[Any], deliver: GoOn, index: int = 0) -> None:
        """Run the ``around_handle`` chain from ``index`` with ``deliver`` innermost."""
        context.reached = index
        last = len(self._arounds) - 1
        middleware, kind = self._arounds[index]
        go_on = deliver if index == last else partial(self.handle, context, deliver, index + 1)
        try:  # no helper coroutine between the kinds: this runs for every message
            if kind == "wrapper":
                wrapper = middleware.around_handle(context, go_on)
                if middleware.blocks(context):
                    await self._stepped_off_loop(wrapper, go_on)
                elif enter(wrapper):
                    try:
                        await go_on()
                    except BaseException as failure:  # a cancellation too: its finally runs
                        leave(wrapper, failure)
                    else:
                        leave(wrapper)
            elif kind == "async":
                await middleware.around_handle(context, go_on)
            else:
                await self._in_thread(middleware, context, go_on)
        except Exception as failure:
            contain_around_failure(context, failure, self.queue_name)
            return
        check_went_on(context, middleware, innermost=index == last, index=index)

    async def _in_thread(
        self, middleware: Middleware, context: MessageContext[Any], go_on: GoOn
    ) -> None:
        """A plain ``around_handle`` on a thread of the stack's pool; its ``call_next`` runs the
        rest on the loop. Cancelled (a stop past its grace), the rest is cancelled with it."""
        loop = asyncio.get_running_loop()
        rest: list[Future[None]] = []
        call_next = partial(_on_loop, loop, go_on, rest)
        run = partial(middleware.around_handle, context, call_next)
        try:
            await loop.run_in_executor(self._threads, contextvars.copy_context().run, run)
        except asyncio.CancelledError:
            for running in rest:
                running.cancel()
            raise

    async def _stepped_off_loop(self, wrapper: Wrapper, go_on: GoOn) -> None:
        """A generator ``around_handle`` that blocks on this message: its steps on a worker
        thread, the rest of the chain awaited on the loop between them."""
        if not await self._off_loop(partial(enter, wrapper)):
            return
        try:
            await go_on()
        except BaseException as failure:
            leave(wrapper, failure)  # on the loop: a cancelled task must not wait for a thread
            return
        await self._off_loop(partial(leave, wrapper))

    async def _off_loop(self, call: Callable[[], R]) -> R:
        """``call()`` on a thread for blocking hooks (with the task's context variables)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._blocking, contextvars.copy_context().run, call)

    def close(self) -> None:
        """End the stack's threads (after the last handler)."""
        for pool in (self._threads, self._blocking):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def __repr__(self) -> str:
        return f"AsyncMiddlewareStack({self._chosen!r})"


def _way(middleware: Middleware, hook: str) -> tuple[Callable[..., Any], Way]:
    call = getattr(middleware, hook)
    if inspect.iscoroutinefunction(call):
        return call, "await"
    return call, "thread" if middleware.blocking else "call"


def _pool(threads: int, name: str) -> ThreadPoolExecutor | None:
    """A pool of up to ``threads`` threads, made as needed (None: none needed)."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name) if threads else None


def _on_loop(loop: asyncio.AbstractEventLoop, go_on: GoOn, rest: list[Future[None]]) -> None:
    """``call_next`` of a plain ``around_handle`` on its worker thread: the rest of the chain
    runs on the loop (noted in ``rest``, so a cancellation reaches it), and this waits for it."""
    running = asyncio.run_coroutine_threadsafe(go_on(), loop)
    rest.append(running)
    running.result()


__all__ = ["AsyncMiddlewareStack"]
