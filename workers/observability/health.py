"""Liveness and readiness: the decisions behind ``/healthz`` and ``/readyz``.

Liveness asks "is this process stuck?" (a probe that fails gets it restarted), so a slow or absent
dependency never fails it: a dequeue thread backing off from a storage outage is waiting on purpose.
It fails when a dequeue thread (or a worker's single event loop, whose ``loop_beat`` shows a
sign of life while nothing blocks it) has shown no sign of life for ``stall_after_s`` -- signs
are the start and end of every storage call and handler call it makes, so a thread wedged in one
of them goes silent -- or when fewer dequeue threads (or tasks) are alive than
``scaling.min_threads``. A healthy thread is never silent longer than its longest wait on purpose
(``backoff.max_idle_s`` idle, ``listener.max_error_delay_s`` after an error) plus one storage call
or handler call. A handler thread (concurrency above 1) is watched only inside its calls: between
messages it waits for work on purpose. A handler thread stuck past ``listener.time_limit_s`` is
not wedged: its message was released, and readiness bounds how many such threads there may be.

Readiness asks "should it get work now?": started, its storage answering (the last storage call
did not fail with an outage), its messages that must be poisoned reaching the poison queue (from
a failed move until one succeeds: they wait in their queue meanwhile), no more handler threads
stuck past their time limit than ``listener.max_stuck_threads``, and not draining. A shutdown
signal turns it red before the drain.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.errors import (
    MessageNotFoundError,
    MessageTooLargeError,
    PayloadNotFoundError,
    StorageError,
)

NOT_AN_OUTAGE = (MessageNotFoundError, MessageTooLargeError, PayloadNotFoundError)
"""Storage errors about one message, not about the storage answering."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """A probe's answer: green or red, and why when red."""

    ok: bool
    reasons: tuple[str, ...] = ()


class Probes(Protocol):
    """What the HTTP endpoint asks: a worker process's own probes, or a supervisor's."""

    def liveness(self) -> ProbeResult: ...

    def readiness(self) -> ProbeResult: ...


def watched_kind(thread: threading.Thread) -> str | None:
    """``"dequeue"`` for the listener's dequeue threads (``cloudqueue:<queue>:<number>``),
    ``"handler"`` for its handler threads (``cloudqueue:<queue>:handler:<number>``), ``"loop"``
    for the thread of a worker on the single event loop (``cloudqueue:<queue>:event-loop``,
    watched as a dequeue thread: a handler that blocks it silences it), else None (a queue name
    holds no colon)."""
    parts = thread.name.split(":")
    if parts[0] == "cloudqueue" and len(parts) == 3 and parts[2] == "event-loop":
        return "loop"
    if parts[0] != "cloudqueue" or not parts[-1].isdigit():
        return None
    if len(parts) == 3:
        return "dequeue"
    return "handler" if len(parts) == 4 and parts[2] == "handler" else None


class Heartbeats:
    """When each watched thread last showed a sign of life (cheap: a few dict stores per call).

    Signs are the start and end of each storage call and handler call. A dequeue thread is watched
    from its first call until it ends: between calls it waits at most its back-off. A handler
    thread is watched only while inside a call: between messages it waits for work on purpose,
    for as long as the queue stays empty. It stays known between calls (with no beat), so that
    each message's calls cost a few dict stores, not a look at the thread's name.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._monotonic = clock.monotonic
        self._beats: dict[int, float] = {}
        self._threads: dict[int, threading.Thread] = {}
        self._open_calls: dict[int, int] = {}
        """A known handler thread's calls under way (a storage call may run inside one); 0
        between messages."""

    def enter(self) -> None:
        """A storage or handler call starts on this thread."""
        ident = threading.get_ident()
        open_calls = self._open_calls.get(ident)
        if open_calls is not None:
            self._open_calls[ident] = open_calls + 1
        elif ident not in self._beats:
            thread = threading.current_thread()
            kind = watched_kind(thread)
            if kind is None:
                return
            if kind == "handler":
                self._open_calls[ident] = 1
            self._threads[ident] = thread
        self._beats[ident] = self._monotonic()

    def leave(self) -> None:
        """The call started by the last ``enter`` on this thread has ended."""
        ident = threading.get_ident()
        open_calls = self._open_calls.get(ident)
        if open_calls == 1:  # a handler thread going back to wait for work: no beat to age
            self._open_calls[ident] = 0
            self._beats.pop(ident, None)
            return
        if open_calls:
            self._open_calls[ident] = open_calls - 1
        if ident in self._beats:
            self._beats[ident] = self._monotonic()

    def silent(self, longer_than_s: float, excluding: frozenset[int] = frozenset()) -> list[str]:
        """The live watched threads silent for longer than ``longer_than_s``, by name, but those
        ``excluding`` names (threads stuck past a time limit: readiness counts those)."""
        now = self._monotonic()
        silent: list[str] = []
        for ident, thread in list(self._threads.items()):
            if not thread.is_alive():  # ended: forget it (its ident may be reused)
                self._beats.pop(ident, None)
                self._threads.pop(ident, None)
                self._open_calls.pop(ident, None)
            elif ident in excluding or (beat := self._beats.get(ident)) is None:
                continue  # stuck past a time limit, or a handler thread waiting for work
            elif now - beat > longer_than_s:
                silent.append(thread.name)
        return sorted(silent)


@dataclass
class Reachability:
    """Whether the storage answered the last call (set by every call that goes through it)."""

    outage: str | None = None
    """The kind of error the last call failed with; None while calls succeed."""

    def succeeded(self) -> None:
        if self.outage is not None:
            self.outage = None

    def failed(self, error: BaseException) -> None:
        if isinstance(error, StorageError) and not isinstance(error, NOT_AN_OUTAGE):
            self.outage = type(error).__name__


@dataclass(frozen=True, slots=True)
class WatchedPool:
    """A listener's pool as the probes see it: its name, live threads, floor, and whether its
    moves to the poison queue fail."""

    queue_name: str
    threads_alive: Callable[[], int]
    min_threads: int
    poisoning_failing: Callable[[], bool] = lambda: False
    stuck_threads: Callable[[], int] = lambda: 0
    """Handler threads still running past the time limit (``listener.time_limit_s``)."""
    stuck_thread_ids: Callable[[], frozenset[int]] = frozenset
    max_stuck_threads: int | None = None
    """More stuck threads than this and the process is not ready (None: no bound)."""

    def too_many_stuck(self) -> int | None:
        """The stuck threads when over the bound, else None."""
        stuck = self.stuck_threads()
        bound = self.max_stuck_threads
        return stuck if bound is not None and stuck > bound else None


@dataclass
class ProcessProbes:
    """The probes of one worker process."""

    stall_after_s: float
    heartbeats: Heartbeats
    reachability: Reachability
    pools: Sequence[WatchedPool] = ()
    started: bool = False
    draining: bool = False

    def liveness(self) -> ProbeResult:
        # A thread stuck past its time limit is accounted for: readiness bounds how many.
        stuck = frozenset().union(*(pool.stuck_thread_ids() for pool in self.pools))
        silent = self.heartbeats.silent(self.stall_after_s, excluding=stuck)
        reasons = [f"wedged: {name}" for name in silent]
        if self.started and not self.draining:
            reasons += [
                f"dead: {pool.queue_name} has fewer than {pool.min_threads} dequeue threads"
                for pool in self.pools
                if pool.threads_alive() < pool.min_threads
            ]
        return ProbeResult(not reasons, tuple(reasons))

    def readiness(self) -> ProbeResult:
        reasons: list[str] = []
        if not self.started:
            reasons.append("starting")
        if self.draining:
            reasons.append("draining")
        outage = self.reachability.outage
        if outage is not None:
            reasons.append(f"storage unreachable: {outage}")
        reasons += [
            f"poison queue unwritable: {pool.queue_name}"
            for pool in self.pools
            if pool.poisoning_failing()
        ]
        reasons += self.stuck_reasons()
        return ProbeResult(not reasons, tuple(reasons))

    def stuck_reasons(self) -> list[str]:
        """One line per pool with more threads stuck past the time limit than it may have."""
        return [
            f"stuck threads: {pool.queue_name} has {stuck} past listener.time_limit_s "
            f"(listener.max_stuck_threads = {pool.max_stuck_threads})"
            for pool in self.pools
            if (stuck := pool.too_many_stuck()) is not None
        ]
