"""Time limits: a handler that runs past ``time_limit_s`` loses its message and its slot.

One monitor thread per listener watches the messages being handled. At a fraction of the limit
(``SOFT_FRACTION``) it logs ``time_limit_near`` once per message. At the limit it *settles* the
message itself -- the delivery counts as failed with reason ``time_limit``: hidden for the retry
delay (renewal stopped), or poisoned as ``time_limit`` at the last allowed delivery -- ends its
lease, gives its in-flight slot back so the loop starts other messages, and then stops the
handler where Python can:

* a coroutine (``async def``) is cancelled: the thread waiting for it returns at once;
* plain code gets ``TimeLimitExceeded`` raised in its thread (an asynchronous exception, as
  dramatiq's ``TimeLimit`` does). Python raises it at the thread's next bytecode, so code blocked
  in C -- ``time.sleep``, a socket read without a timeout, a lock -- is not stopped by it.

A thread that has not returned is *stuck*: counted (``stuck_threads``) until it does. Whatever it
does then, the message is not settled a second time (``Lease.abandoned``). The wait for a slot,
middleware before the handler, and settlement are not timed: the limit covers the handler's calls
for one message (all its items, when a publisher batched them).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import structlog

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.in_flight import Slot, current_slot
from cloudqueue.listener.consumer.interrupts import interrupt, withdraw_interrupt
from cloudqueue.listener.consumer.leases import Lease
from cloudqueue.listener.consumer.middleware import MessageContext
from cloudqueue.listener.errors import TimeLimitExceeded

R = TypeVar("R")

log = structlog.get_logger(__name__)

SOFT_FRACTION = 0.8
"""``time_limit_near`` is logged once a handler has run this fraction of its limit."""

MAX_NAP_S = 0.25
"""The monitor looks at its clock at least this often (a test's clock may jump)."""

Expire = Callable[[Lease, MessageContext[Any], str], None]
"""Settles a message past its limit (lease, context, error): the listener's, not ours."""


@dataclass(eq=False, slots=True)
class Handling:
    """One message's handler calls under a time limit, as the monitor sees them."""

    limits: TimeLimits
    lease: Lease
    context: MessageContext[Any]
    thread_id: int
    started: float
    warn_at: float
    deadline: float
    slot: Slot | None
    state: Literal["running", "expired", "finished"] = "running"
    cancel: Callable[[], object] | None = None
    """How to stop the handler other than by an exception in its thread (a coroutine's
    future), registered by the thread while it waits on it."""
    interrupted: bool = False
    """True once ``TimeLimitExceeded`` was set to be raised in the thread."""

    @property
    def expired(self) -> bool:
        return self.state == "expired"


_current: ContextVar[Handling | None] = ContextVar("cloudqueue_handling", default=None)


def current_handling() -> Handling | None:
    """The time-limited handling on this thread, if any."""
    return _current.get()


def wait_within_limit(future: concurrent.futures.Future[R], timeout_s: float | None = None) -> R:
    """``future.result(timeout_s)``, cancelled at the time limit of the handling on this thread
    (if any): then ``TimeLimitExceeded`` is raised here at once, whatever the future's work is
    doing."""
    handling = _current.get()
    if handling is None:
        return future.result(timeout_s)
    limits = handling.limits
    limits.cancel_with(handling, future.cancel)
    try:
        return future.result(timeout_s)
    except concurrent.futures.CancelledError:
        if handling.expired:
            raise TimeLimitExceeded from None
        raise
    finally:
        limits.cancel_with(handling, None)


class TimeLimits:
    """The time limit of one listener's handlers, and the monitor thread that enforces it."""

    def __init__(
        self,
        limit_s: float,
        *,
        queue_name: str,
        clock: Clock,
        expire: Expire,
        max_nap_s: float = MAX_NAP_S,
    ) -> None:
        if not (math.isfinite(limit_s) and limit_s > 0):
            raise ValueError(f"time_limit_s must be > 0, got {limit_s}")
        self.limit_s = limit_s
        self.queue_name = queue_name
        self.clock = clock
        self._expire_message = expire
        self._max_nap_s = max_nap_s
        self._lock = threading.Lock()
        self._running: set[Handling] = set()
        self._stuck: set[Handling] = set()
        self.expired = 0
        """Deliveries stopped at the limit so far."""
        self._next_wake = math.inf
        """When the monitor looks next: a start due earlier wakes it (rarely: see ``_check``)."""
        self._starts = self._starts_seen = 0
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stuck_threads(self) -> int:
        """Threads whose handler passed the limit and has not returned (yet)."""
        return len(self._stuck)

    def stuck_thread_ids(self) -> frozenset[int]:
        """The idents of the stuck threads (liveness does not count them as wedged)."""
        with self._lock:
            return frozenset(handling.thread_id for handling in self._stuck)

    def run(self, lease: Lease, context: MessageContext[Any], work: Callable[[], None]) -> None:
        """Run ``work`` (the handler calls of one message) under the limit."""
        handling = self._start(lease, context)
        token = _current.set(handling)
        try:
            with contextlib.suppress(TimeLimitExceeded):  # the monitor settled the message
                work()
        finally:
            _current.reset(token)
            while True:  # the pending interrupt may fire in here once; never twice
                try:
                    self._finish(handling)
                    break
                except TimeLimitExceeded:
                    continue

    def cancel_with(self, handling: Handling, cancel: Callable[[], object] | None) -> None:
        """While the thread waits on something cancellable, stop it with ``cancel`` at the limit
        (``None`` when the wait is over)."""
        with self._lock:
            handling.cancel = cancel
            late = cancel is not None and handling.expired
        if late and cancel is not None:  # the limit passed just before the wait began
            cancel()

    def close(self) -> None:
        """Stop the monitor (stuck threads stay where they are)."""
        self._closed.set()
        self._wake.set()

    # -- the handler's thread --------------------------------------------------------------

    def _start(self, lease: Lease, context: MessageContext[Any]) -> Handling:
        now = self.clock.monotonic()
        handling = Handling(
            self,
            lease,
            context,
            threading.get_ident(),
            now,
            now + self.limit_s * SOFT_FRACTION,
            now + self.limit_s,
            current_slot(),
        )
        with self._lock:
            self._running.add(handling)
            self._starts += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._monitor,
                    name=f"cloudqueue:{self.queue_name}:time-limits",
                    daemon=True,
                )
                self._thread.start()
        if handling.warn_at < self._next_wake:
            self._wake.set()
        return handling

    def _finish(self, handling: Handling) -> None:
        with self._lock:
            state = handling.state
            if state == "finished":
                return
            handling.state = "finished"
            if state == "running":
                self._running.discard(handling)
                return
            if handling.interrupted:
                withdraw_interrupt(handling.thread_id)  # not raised yet: never outside the handler
            self._stuck.discard(handling)
        log.info(
            "time_limit_late_return",
            queue=self.queue_name,
            message_id=handling.lease.message.id,
            ran_s=round(self.clock.monotonic() - handling.started, 3),
        )

    # -- the monitor ---------------------------------------------------------------------------

    def _monitor(self) -> None:
        while not self._closed.is_set():
            self._wake.clear()
            try:
                delay_s = self._check(self.clock.monotonic())
            except Exception:  # pragma: no cover - never let the monitor die
                log.exception("time_limit_monitor_failed", queue=self.queue_name)
                delay_s = self._max_nap_s
            if delay_s is None:
                self._wake.wait()
            else:
                self._wake.wait(min(delay_s, self._max_nap_s))

    def _check(self, now: float) -> float | None:
        """Warn and expire what is due; the seconds to the next look (None: nothing ran since
        the last one, so the next start wakes the monitor)."""
        with self._lock:
            warn = [h for h in self._running if h.warn_at <= now and h.deadline > now]
            for handling in warn:
                handling.warn_at = math.inf  # once per message
            due = [h for h in self._running if h.deadline <= now]
            for handling in due:
                self._claim(handling)
            upcoming = [min(h.warn_at, h.deadline) for h in self._running]
            flowing, self._starts_seen = self._starts != self._starts_seen, self._starts
            if not upcoming and flowing:
                # Fast handlers leave the set empty between messages: nap rather than block, or
                # each next start would wake the monitor (a thread switch per message). Nothing
                # started from now on is due before this nap ends.
                upcoming = [now + min(self.limit_s * SOFT_FRACTION, self._max_nap_s)]
            self._next_wake = min(upcoming, default=math.inf)
        for handling in warn:
            log.warning(
                "time_limit_near",
                queue=self.queue_name,
                message_id=handling.lease.message.id,
                ran_s=round(now - handling.started, 3),
                time_limit_s=self.limit_s,
            )
        for handling in due:
            self._expire(handling, now)
        return None if not upcoming else max(0.0, self._next_wake - now)

    def _claim(self, handling: Handling) -> None:
        """Take the message from its thread (the caller holds the lock)."""
        self._running.discard(handling)
        handling.state = "expired"
        handling.lease.abandoned = True
        self._stuck.add(handling)
        self.expired += 1

    def _expire(self, handling: Handling, now: float) -> None:
        lease = handling.lease
        error = (
            f"TimeLimitExceeded: the handler ran past listener.time_limit_s ({self.limit_s:g} s)"
        )
        try:
            self._expire_message(lease, handling.context, error)
        except Exception:
            log.exception("time_limit_settle_failed", queue=self.queue_name)
        if handling.slot is not None:
            handling.slot.give_back()
        with self._lock:
            cancel = handling.cancel if handling.expired else None
            sent = False
            if handling.expired and cancel is None:
                sent = handling.interrupted = interrupt(handling.thread_id)
        if cancel is not None:
            cancel()
        log.warning(
            "time_limit",
            queue=self.queue_name,
            message_id=lease.message.id,
            ran_s=round(now - handling.started, 3),
            time_limit_s=self.limit_s,
            stopped="cancelled"
            if cancel is not None
            else "interrupt_raised"
            if sent
            else "returned",
            stuck_threads=len(self._stuck),
        )

    def __repr__(self) -> str:
        return (
            f"TimeLimits({self.limit_s:g} s, running={len(self._running)}, "
            f"stuck_threads={len(self._stuck)})"
        )


__all__ = ["SOFT_FRACTION", "Handling", "TimeLimits", "current_handling", "wait_within_limit"]
