"""``around_handle`` written as a generator: ``yield`` where ``call_next()`` would be.

A plain ``around_handle`` calls ``call_next()`` and so must run where the rest of the chain can be
waited for by a plain call: on a dequeue thread, or -- on the event-loop consumer -- on a worker
thread of its own, two thread hops a message. An ``async def`` one runs on an event loop: on the
threaded listener, a side loop (a hop per message again). A generator runs on either, with no hop:
each stack steps it to its ``yield``, runs the rest of the chain its own way (a call, or an
``await``), then steps it to its end::

    def around_handle(self, context, call_next):
        started = time.perf_counter()
        yield                                  # the rest of the chain, and the handler
        self.seconds = time.perf_counter() - started

Returning before the ``yield`` goes no further (a decision, a skip); a failure of the rest of the
chain (a cancellation on the event loop) is raised at the ``yield``, so ``try``/``finally`` and
``with`` blocks around it run as they would around ``call_next()``. Only a middleware whose code
around the ``yield`` is short can be written so: it runs on the loop between handlers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from typing import Literal

from cloudqueue.listener.consumer.middleware import Middleware

Wrapper = Generator[None, None, None]
"""What a generator ``around_handle`` returns: its code before and after the ``yield``."""

AroundKind = Literal["plain", "async", "wrapper"]


def around_kind(middleware: Middleware) -> AroundKind:
    """How a stack calls this middleware's ``around_handle``."""
    around = middleware.around_handle
    if inspect.iscoroutinefunction(around):
        return "async"
    return "wrapper" if inspect.isgeneratorfunction(around) else "plain"


def enter(wrapper: Wrapper) -> bool:
    """Run the wrapper's code up to its ``yield``; False when it returned there instead (it
    decided, or skipped the message: the chain goes no further)."""
    try:
        next(wrapper)
    except StopIteration:
        return False
    return True


def leave(wrapper: Wrapper, failure: BaseException | None = None) -> None:
    """Run the wrapper's code after its ``yield``: with ``failure`` raised there when the rest of
    the chain raised it (the wrapper may handle it, or it comes back out of here)."""
    try:
        if failure is None:
            next(wrapper)
        else:
            wrapper.throw(failure)
    except StopIteration:
        return
    wrapper.close()
    raise RuntimeError("an around_handle generator may yield only once")


def run_wrapped(wrapper: Wrapper, go_on: Callable[[], object]) -> None:
    """Step the wrapper around a plain call of the rest of the chain (the threaded path)."""
    if not enter(wrapper):
        return
    try:
        go_on()
    except BaseException as failure:  # raised back out, unless the wrapper handles it
        leave(wrapper, failure)
        return
    leave(wrapper)


__all__ = ["AroundKind", "Wrapper", "around_kind", "enter", "leave", "run_wrapped"]
