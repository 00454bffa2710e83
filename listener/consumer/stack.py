"""A listener's middleware in order, and how each hook is called on them (see ``middleware``).

The stack keeps, for each hook, the middleware that override it, so a hook nobody overrides
costs one empty-tuple test on the hot path. Errors are contained here: a hook that raises is
logged (``middleware_failed``, with its traceback) and the listener goes on; in
``around_handle`` the message's handling counts as failed (``MessageContext.middleware_error``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import structlog

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.events import QueueEmptyDecision
from cloudqueue.listener.consumer.middleware import HOOKS, MessageContext, Middleware, overrides
from cloudqueue.listener.consumer.wrapping import AroundKind, around_kind, run_wrapped
from cloudqueue.listener.errors import ConfigurationError

log = structlog.get_logger(__name__)


class MiddlewareStack:
    """The ordered middleware of one listener, with one call path per hook."""

    def __init__(
        self, middleware: Sequence[Middleware], *, queue_name: str, loop: LoopThread | None = None
    ) -> None:
        self.queue_name = queue_name
        self._middleware: list[Middleware] = []
        self._hooks: dict[str, tuple[Middleware, ...]] = {}
        self._arounds: tuple[tuple[Middleware, AroundKind], ...] = ()
        self._calls: dict[str, tuple[tuple[Callable[..., Any], bool], ...]] = {}
        self.wraps = self.watches_settlement = self.gates = False
        self._own_loop = loop is None
        self._loop = loop or LoopThread(f"cloudqueue:{queue_name}:middleware")
        for each in middleware:
            self.add(each)
        if not self._hooks:
            self._index()

    @property
    def middleware(self) -> tuple[Middleware, ...]:
        return tuple(self._middleware)

    def add(self, middleware: Middleware) -> None:
        """Append ``middleware`` (innermost of the wrappers); one may decide idle waits."""
        if not isinstance(middleware, Middleware):
            raise ConfigurationError(
                f"{middleware!r} is not a Middleware (subclass listener.Middleware)"
            )
        deciders = [m for m in (*self._middleware, middleware) if overrides(m, "on_queue_empty")]
        if len(deciders) > 1:
            # Only one of them can decide how long an idle thread waits; never ignore one.
            raise ConfigurationError(
                f"two middleware decide idle waits ({_names(deciders)}): a scaler decides them "
                "itself, so use one or the other"
            )
        self._middleware.append(middleware)
        self._index()

    def wants(self, hook: str) -> bool:
        """True when some middleware overrides ``hook``."""
        return bool(self._hooks[hook])

    def chosen(self, hook: str) -> tuple[Middleware, ...]:
        """The middleware that override ``hook``, in order (the event-loop stack calls them)."""
        return self._hooks[hook]

    def emit(self, hook: str, *args: Any) -> None:
        """Call ``hook(*args)`` on each middleware that has it; errors are logged, not raised."""
        for call, is_async in self._calls[hook]:
            try:
                if is_async:
                    self._loop.run(call(*args))
                else:
                    call(*args)
            except Exception:
                log.exception("middleware_failed", queue=self.queue_name, hook=hook)

    def queue_empty(self, *args: Any) -> QueueEmptyDecision | None:
        """The idle decision of the middleware that makes it, if any (None on its error)."""
        for middleware in self._hooks["on_queue_empty"]:
            try:
                return middleware.on_queue_empty(*args)
            except Exception:
                log.exception("middleware_failed", queue=self.queue_name, hook="on_queue_empty")
        return None

    def close(self) -> None:
        """Stop the event loop of async hooks, if this stack started it."""
        if self._own_loop:
            self._loop.close()

    def handle(
        self, context: MessageContext[Any], deliver: Callable[[], None], index: int = 0
    ) -> None:
        """Run the ``around_handle`` chain from ``index`` with ``deliver`` (the observers, or the
        early settlement of a message that cannot be handled) innermost."""
        context.reached = index
        last = len(self._arounds) - 1
        middleware, kind = self._arounds[index]
        # The innermost middleware calls ``deliver`` itself; it went on when the message was
        # handled or settled (deliver never raises).
        go_on = deliver if index == last else partial(self.handle, context, deliver, index + 1)
        try:
            if kind == "plain":
                middleware.around_handle(context, go_on)
            elif kind == "wrapper":
                run_wrapped(middleware.around_handle(context, go_on), go_on)
            else:
                self._loop.run(middleware.around_handle(context, _in_thread(go_on)))
        except Exception as failure:
            contain_around_failure(context, failure, self.queue_name)
            return
        check_went_on(context, middleware, innermost=index == last, index=index)

    def _index(self) -> None:
        self._hooks = {
            hook: tuple(m for m in self._middleware if overrides(m, hook)) for hook in HOOKS
        }
        # Bound once, with whether each is a coroutine function: emit is on the hot path.
        self._calls = {
            hook: tuple(
                (getattr(m, hook), inspect.iscoroutinefunction(getattr(m, hook))) for m in chosen
            )
            for hook, chosen in self._hooks.items()
        }
        self._arounds = tuple((m, around_kind(m)) for m in self._hooks["around_handle"])
        # Read once per message, so attributes rather than ``wants`` calls.
        self.wraps = bool(self._arounds)
        self.watches_settlement = bool(self._hooks["after_settle"])
        self.gates = bool(self._hooks["before_handle"])

    def __repr__(self) -> str:
        return f"MiddlewareStack({_names(self._middleware)})"


def contain_around_failure(
    context: MessageContext[Any], failure: Exception, queue_name: str
) -> None:
    """A middleware raised around the handling: logged, and the message counts as failed."""
    log.exception("middleware_failed", queue=queue_name, hook="around_handle")
    context.middleware_error = context.middleware_error or failure


def check_went_on(
    context: MessageContext[Any], middleware: Middleware, *, innermost: bool, index: int
) -> None:
    """A middleware that neither went on nor decided leaves the message failed, never deleted
    unhandled: the innermost went on when the message was handled or settled, the others when
    the chain got deeper than them."""
    went_on = (
        (context.handled or context.outcome is not None) if innermost else context.reached > index
    )
    if not went_on and context.decision is None and context.middleware_error is None:
        context.middleware_error = RuntimeError(
            f"middleware {type(middleware).__name__} neither went on nor decided"
        )


def _in_thread(go_on: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    """``call_next`` for an async ``around_handle``: the rest of the chain, off the loop."""

    async def go_on_async() -> None:
        await asyncio.to_thread(go_on)

    return go_on_async


def _names(middleware: Sequence[Middleware]) -> str:
    return ", ".join(type(m).__name__ for m in middleware) or "none"


__all__ = ["MiddlewareStack", "check_went_on", "contain_around_failure"]
