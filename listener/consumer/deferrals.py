"""Messages a middleware deferred (``MessageContext.defer``): held, out of every slot, until
resumed.

A deferred message keeps its lease, so the renewer keeps it hidden however long it waits, and it
holds no handler slot, so the messages behind it flow (a busy key must not stall other keys).
When it is resumed -- by the middleware, when what it waited for is over, or after a delay -- it
goes to the front of the listener's hand-off and a dequeue thread reads and handles it again; its
dequeue count is unchanged, so the wait costs it no delivery.

A resume may come from another thread before the deferring thread has finished with the message;
it then takes effect once that thread hands the message over (``parked``), never earlier, so no
two threads hold one lease. When the listener's last thread leaves, deferred messages are
released to the queue with the fetched ones (``take_all``). A listener holds at most
``MAX_DEFERRED`` of them: past that its threads stop fetching until some are resumed, so a key
with a long backlog cannot make a worker hold the whole queue.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from dataclasses import dataclass

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.handoff import HandOff
from cloudqueue.listener.consumer.leases import Lease
from cloudqueue.listener.consumer.middleware import Resume

MAX_DEFERRED = 1024
"""Deferred messages one listener holds at most: past it, its threads fetch no more until some
are resumed (each held message costs memory and a visibility renewal per half timeout)."""


@dataclass(slots=True, eq=False)
class _Entry:
    lease: Lease
    handed_over: bool = False
    """The deferring thread is done with the message (``parked`` was called)."""
    resumed: bool = False


class Deferrals:
    """The deferred messages of one listener, and the timer that resumes them after a delay."""

    def __init__(
        self, handoff: HandOff, *, nudge: threading.Event, stopping: threading.Event, clock: Clock
    ) -> None:
        self._handoff = handoff
        self._nudge = nudge
        self._stopping = stopping
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._timers: list[tuple[float, int, _Entry]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._timer_thread: threading.Thread | None = None

    def __len__(self) -> int:
        with self._changed:
            return len(self._entries)

    @property
    def full(self) -> bool:
        """True when ``MAX_DEFERRED`` messages are deferred (read without the lock: a hint)."""
        return len(self._entries) >= MAX_DEFERRED

    def defer(self, lease: Lease, resume_after_s: float | None) -> Resume:
        """Park ``lease`` (its thread hands it over later); resume it when the returned function
        is called, or after ``resume_after_s``."""
        entry = _Entry(lease)
        lease.parked = True
        with self._changed:
            self._entries[lease.message.id] = entry
            if resume_after_s is not None:
                due = self._clock.monotonic() + resume_after_s
                heapq.heappush(self._timers, (due, next(self._order), entry))
                self._ensure_timer()
                self._changed.notify()
        return lambda: self._resume(entry)

    def parked(self, lease: Lease) -> None:
        """The deferring thread is done with ``lease``: it may go back in line now."""
        with self._changed:
            entry = self._entries.get(lease.message.id)
            if entry is None or entry.lease is not lease:
                return
            entry.handed_over = True
            ready = entry.resumed
        if ready:
            self._hand_back(entry)

    def take_all(self) -> list[Lease]:
        """Every deferred message handed over, removed (to be released to the queue)."""
        with self._changed:
            taken = [e for e in self._entries.values() if e.handed_over]
            for entry in taken:
                del self._entries[entry.lease.message.id]
        for entry in taken:
            entry.lease.parked = False
        return [entry.lease for entry in taken]

    def _resume(self, entry: _Entry) -> None:
        with self._changed:
            if entry.resumed or self._entries.get(entry.lease.message.id) is not entry:
                return  # resumed already, or released
            entry.resumed = True
            ready = entry.handed_over
        if ready:
            self._hand_back(entry)

    def _hand_back(self, entry: _Entry) -> None:
        with self._changed:
            if self._entries.get(entry.lease.message.id) is not entry:
                return
            del self._entries[entry.lease.message.id]
        entry.lease.parked = False
        self._handoff.put_first(entry.lease)
        self._nudge.set()  # a thread waiting out an idle back-off takes it now

    def _ensure_timer(self) -> None:
        """Start the timer thread unless it runs (called holding the lock)."""
        if self._timer_thread is None:
            self._timer_thread = threading.Thread(
                target=self._run_timers, name="cloudqueue:deferrals", daemon=True
            )
            self._timer_thread.start()

    def _run_timers(self) -> None:
        """Resume what is due; the thread ends when no timer is left (``defer`` starts another)."""
        while not self._stopping.is_set():
            with self._changed:
                if not self._timers:
                    self._timer_thread = None
                    return
                now = self._clock.monotonic()
                due = []
                while self._timers and self._timers[0][0] <= now:
                    due.append(heapq.heappop(self._timers)[2])
                if not due:
                    # Real time, at most a second at a time: an injected clock may jump.
                    self._changed.wait(min(self._timers[0][0] - now, 1.0))
                    continue
            for entry in due:
                self._resume(entry)

    def __repr__(self) -> str:
        return f"Deferrals(held={len(self)})"


__all__ = ["Deferrals"]
