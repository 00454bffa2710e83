"""Running a worker's or job's ``startup`` and ``shutdown`` hooks, plain or ``async def``.

An async hook runs on the event loop its async handlers run on (``AsyncHandlerRunner.loop``), so
an ``aiohttp.ClientSession`` or a database pool opened in ``startup`` is usable by every handler
coroutine, and ``shutdown`` closes it on that same loop. A failing ``startup`` is one log line
(``startup_failed``: the exception and where it was raised) and ``StartupFailedError``: the
process takes no message and exits with ``STARTUP_FAILED_EXIT_CODE``, which a ``--processes N``
supervisor does not restart. A failing ``shutdown`` is logged, never raised: the drain is done.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.errors import CloudQueueError, ConfigurationError

log = structlog.get_logger(__name__)


class StartupFailedError(CloudQueueError):
    """A worker's or job's ``startup`` raised (already logged as ``startup_failed``)."""


def run_hook(hook: Callable[[], Awaitable[None] | None], loop: LoopThread) -> None:
    """Call ``hook``; await what it returns on ``loop``. Raises what the hook raised."""
    result = hook()
    if inspect.isawaitable(result):
        loop.run(result)


def start_up(owner: Any, loop: LoopThread, **where: str) -> None:
    """Run ``owner.startup``; when it raises, log one line naming ``where`` and the exception
    and raise ``StartupFailedError``."""
    try:
        run_hook(owner.startup, loop)
    except Exception as error:
        log.error("startup_failed", **where, error=_one_line(error), at=_raised_at(error))
        named = " ".join(where.values())
        raise StartupFailedError(f"startup of {named} failed: {_one_line(error)}") from error


def shut_down(owner: Any, loop: LoopThread, **where: str) -> None:
    """Run ``owner.shutdown``; an exception is logged (``shutdown_failed``), not raised."""
    try:
        run_hook(owner.shutdown, loop)
    except Exception:
        log.exception("shutdown_failed", **where)


def wind_down(
    owner: Any, loop: LoopThread, *, started_up: bool, on_stop_failed: str, **where: str
) -> None:
    """After a worker's or a job's drain: cancel the coroutines that outlived it, call
    ``owner.on_stop``, then ``owner.shutdown`` on the same loop if ``startup`` had returned.
    Errors are logged (``on_stop_failed`` names the event), never raised."""
    loop.cancel_pending()
    try:
        call_plain_hook(owner.on_stop)
    except Exception:
        log.exception(on_stop_failed, **where)
    if started_up:
        shut_down(owner, loop, **where)


def call_plain_hook(hook: Callable[..., object], *arguments: Any) -> None:
    """Call a hook that is not awaited (``on_start``, ``on_stop``): an awaitable it returns is
    an error, not a coroutine silently dropped."""
    result = hook(*arguments)
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # no "never awaited" warning on top of the error
        raise ConfigurationError(
            f"{getattr(hook, '__qualname__', hook)!r} returned an awaitable, which is not awaited: "
            "put async work in async def startup(self) / shutdown(self)"
        )


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _raised_at(error: BaseException) -> str:
    """``file:line`` where the exception was raised (the innermost frame), for the one line."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


__all__ = [
    "StartupFailedError",
    "call_plain_hook",
    "run_hook",
    "shut_down",
    "start_up",
]
