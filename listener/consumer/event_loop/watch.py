"""Noticing a blocked event loop: a sync call inside an ``async def`` handler, named in the log.

On the single event loop every handler, renewal, get and delete of a worker shares one thread. A
handler that calls something blocking (``time.sleep``, a sync HTTP client, a long CPU-bound
step) holds that thread: the other handlers wait, no visibility is renewed, and a message held
longer than its visibility timeout reappears and runs twice. Liveness turns ``/healthz`` red
naming the loop's thread; this watch says which code did it, while it happens and how long it
lasted, so the fix (``await asyncio.to_thread(blocking_call, ...)``) is one log line away.

A watch thread looks at the loop thread's stack every ``blocked_after_s / 4``, without waking the
loop (a ping through ``call_soon_threadsafe`` cost about 0.9 ms of CPU a second): the callback the
loop runs (a task's step) is its frame of ``Handle._run``. The same one seen for longer than
``blocked_after_s`` means the loop is blocked: the thread names the outermost frame of that
callback that is neither asyncio's nor cloudqueue's (the handler, a user's middleware,
``startup``...), the line it is at and what it called, and logs ``event_loop_blocked``
(warning). Once that callback has ended it logs ``event_loop_unblocked`` with ``blocked_s``, how
long it was seen running (to within one look either way). The watch uses real time, so a
virtual-time loop is watched the same way.

Renewing the held messages from the watch thread while the loop is blocked was weighed and left
out: the loop's own renewals and settlements would race the thread's new pop receipts (a lock on
every renewal to prevent it), and it would hide the fault it is meant to show.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import sys
import threading
from dataclasses import dataclass
from types import FrameType

import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock

BLOCKED_AFTER_S = 1.0
"""How long one callback may hold the loop before it counts as blocked."""

LOOKS_PER_THRESHOLD = 4

CALLBACK_CODE = asyncio.events.Handle._run.__code__
"""The frame of each callback the loop runs (a task's step among them)."""

FRAMEWORK_MODULES = ("asyncio", "cloudqueue", "contextlib", "concurrent", "threading")
"""Modules whose frames run a handler rather than being it."""

HINT = "run blocking calls off the loop: await asyncio.to_thread(call, ...)"

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Blocker:
    """What a blocked loop was running: the code it was in, and the line it was at."""

    code: str
    """``module.qualified_name`` of the code that blocks: the outermost frame of the running
    callback that is not the framework's (a handler), else the innermost frame."""
    at: str
    """``file:line`` that code is at (in a handler: the line that made the blocking call)."""
    call: str
    """``module.qualified_name`` of what that code called (``requests.api.get``), or of the
    code itself when it called a C function (``time.sleep``)."""


def blocker_of(frame: FrameType | None) -> Blocker:
    """Name what a loop's thread runs, from its innermost ``frame`` (``sys._current_frames()``)."""
    frames: list[FrameType] = []  # innermost first
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    if not frames:
        return Blocker("unknown", "unknown", "unknown")
    # Inward of the loop's ``Handle._run`` is the callback it runs (a task's coroutines); what
    # runs the loop (a thread, a test) is left out.
    edge = next((n for n, f in enumerate(frames) if f.f_code is CALLBACK_CODE), len(frames))
    own = next((n for n in reversed(range(edge)) if not _framework(frames[n])), 0)
    code, called = frames[own], frames[max(0, own - 1)]
    return Blocker(_name(code), f"{code.f_code.co_filename}:{code.f_lineno}", _name(called))


def running_callback(frame: FrameType | None) -> FrameType | None:
    """The loop's frame of the callback it runs now, from its thread's innermost ``frame``;
    None while it waits for work or is between callbacks."""
    while frame is not None:
        if frame.f_code is CALLBACK_CODE:
            return frame
        frame = frame.f_back
    return None


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", "?"))


def _name(frame: FrameType) -> str:
    return f"{_module(frame)}.{frame.f_code.co_qualname}"


def _framework(frame: FrameType) -> bool:
    return _module(frame).split(".", maxsplit=1)[0] in FRAMEWORK_MODULES


class LoopWatch:
    """Watches the loop it is started on from a thread of its own, until ``stop``."""

    def __init__(
        self,
        queue_name: str,
        *,
        blocked_after_s: float = BLOCKED_AFTER_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.queue_name = queue_name
        self.blocked_after_s = blocked_after_s
        self.interval_s = blocked_after_s / LOOKS_PER_THRESHOLD
        self._monotonic = clock.monotonic
        self._callback: FrameType | None = None
        """The callback seen running at the last look (held: its frame is not reused)."""
        self._since = 0.0
        """When that callback was first seen."""
        self._blocker: Blocker | None = None
        """What blocks the loop, once that callback ran too long (None: not blocked)."""
        self._stopped = threading.Event()
        self._loop_thread = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching the running loop (call it on that loop)."""
        asyncio.get_running_loop()  # refuses a call off any loop
        self._loop_thread = threading.get_ident()
        self._thread = threading.Thread(
            target=self._watch, name=f"loop-watch:{self.queue_name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        self._callback = None

    def check(self) -> None:
        """One look at the loop's thread (the watch thread's, every ``interval_s``)."""
        now = self._monotonic()
        frame = sys._current_frames().get(self._loop_thread)
        callback = running_callback(frame)
        if callback is not None and callback is self._callback:
            if self._blocker is None and now - self._since > self.blocked_after_s:
                self._blocker = found = blocker_of(frame)
                log.warning(
                    "event_loop_blocked",
                    queue=self.queue_name,
                    handler=found.code,
                    at=found.at,
                    call=found.call,
                    blocked_s=round(now - self._since, 2),
                    hint=HINT,
                )
            return
        if self._blocker is not None:  # the blocking callback has ended
            log.warning(
                "event_loop_unblocked",
                queue=self.queue_name,
                handler=self._blocker.code,
                blocked_s=round(now - self._since, 2),
            )
        self._callback, self._since, self._blocker = callback, now, None

    def _watch(self) -> None:
        # A periodic look, not a wait for a condition: the interval is the watch's resolution.
        while not self._stopped.wait(self.interval_s):
            self.check()


__all__ = ["BLOCKED_AFTER_S", "Blocker", "LoopWatch", "blocker_of", "running_callback"]
