"""Many messages in flight per dequeue thread: handling and settling off the receive loop.

With ``concurrency = 1`` a dequeue thread handles each message itself, as it always did. With
more, it is a receive loop: it reserves a *slot* before it takes (or fetches) a message, and hands
the message to the listener's handler pool, so up to ``concurrency`` messages of each thread are
being handled -- and each settled (deleted, retried, poisoned) by its own task as soon as its own
handler returns -- while the thread goes on receiving. In-flight capacity is therefore receive
loops times concurrency, and the scaler grows it by adding receive loops.

How many of a loop's messages are in flight depends on how long its handlers take on their own
(``slots_per_loop``): a handler that waits -- on an API, a database, a file -- gets the full
``concurrency``, since that is what hides its waiting; one that returns at once gets two slots, one
message being handled while the previous one is settled. More would only put more requests in
flight at once against storage, which the scaler already sizes by adding receive loops: on a
saturated store (Azurite on two cores) eight in flight per loop drained a no-op backlog about 10 %
slower than one or two, with more CPU per message on both sides.

A handler thread that settled its message and finds another one waiting in the listener's
hand-off takes it on in the same slot (``follow_on``), up to ``MAX_FOLLOW_ONS`` in a row: handing
each message over -- waking a handler thread, then waking the loop to give the slot back -- costs
more CPU than a quick message itself. A slot a time limit gave back early (its handler overran)
takes nothing more on. The loop still starts the first message of each run, and
wakes at the end of it to count, fetch and look at its limits again.

Handler threads are started only when work needs them and never poll storage, so an idle worker
still costs one poller (or none with push triggers), whatever the limit. Nothing about settlement
changes: a message is deleted only after every observer returned, its lease is renewed with the
newest pop receipt while it waits for a slot or is handled, and a thread that leaves (scale-in or
``stop``) first waits for its own in-flight messages.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from contextvars import ContextVar

import structlog

log = structlog.get_logger(__name__)

DEFAULT_CONCURRENCY = 8
"""A worker's default: with the scaler's 16 threads, 128 messages in flight -- enough to keep a
200 ms handler from capping throughput below what the storage round-trips allow."""

MAX_CONCURRENCY = 256

WAITING_HANDLER_S = 0.005
"""A handler taking this long on its own (settlement excluded, smoothed) waits on something: its
loop keeps ``concurrency`` messages in flight. Below it, handling is CPU work the GIL serializes,
and more in flight buys nothing."""

FAST_HANDLER_SLOTS = 2
"""Slots of a loop whose handlers return at once: the next message is handled while the previous
one's delete is on its way, so no handler waits for a settlement round-trip."""


MAX_FOLLOW_ONS = 32
"""Messages a handler thread takes on after the one it was given before its slot goes back to the
loop (one batch): the loop then counts them, sees a scale-in or a new limit, and fetches."""

FollowOn = Callable[[], Callable[[], bool] | None]
"""The task for the next waiting message, or None when there is none (or none may be taken)."""


def slots_per_loop(concurrency: int, handler_s: float | None) -> int:
    """Messages one receive loop keeps in flight, given its handlers' smoothed own time
    (None before the first one returned: the full concurrency, so a slow handler starts fast)."""
    if handler_s is not None and handler_s < WAITING_HANDLER_S:
        return min(concurrency, FAST_HANDLER_SLOTS)
    return concurrency


class HandlerPool:
    """The listener's handler threads, shared by all its receive loops, started on demand.

    A thread is started only when no idle one is waiting, so their number follows the peak in
    flight. They are daemon threads, like the dequeue threads: a handler still stuck when the
    shutdown grace period ends must not keep the process from exiting (its message simply
    reappears). ``concurrent.futures.ThreadPoolExecutor`` joins its threads at exit, hence this.
    """

    def __init__(self, name_prefix: str) -> None:
        self._name_prefix = name_prefix
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self.loops_waiting = 0
        """Receive loops waiting for a free slot (a test's virtual clock tells them from busy)."""

    def loop_waits(self, change: int) -> None:
        """A receive loop starts (+1) or ends (-1) a wait for a free slot."""
        with self._lock:
            self.loops_waiting += change

    @property
    def threads(self) -> int:
        """Handler threads started and not yet told to exit."""
        with self._lock:
            return self._threads

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task`` on an idle handler thread, or on a new one when none is idle."""
        with self._lock:
            start = self._idle == 0
            if start:
                self._threads += 1
                number = self._threads
            else:
                self._idle -= 1  # that idle thread is now spoken for
        self._tasks.put(task)
        if start:
            threading.Thread(
                target=self._work, name=f"{self._name_prefix}:handler:{number}", daemon=True
            ).start()

    def close(self) -> None:
        """Let every handler thread exit once the tasks before it are done."""
        with self._lock:
            count, self._threads, self._idle = self._threads, 0, 0
        for _ in range(count):
            self._tasks.put(None)

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                task()
            except BaseException:  # pragma: no cover - InFlight's task catches what it can
                log.critical("handler_task_crashed", exc_info=True)
            with self._lock:
                self._idle += 1

    def __repr__(self) -> str:
        return f"HandlerPool(threads={self.threads})"


class _Tally:
    """A count that handler threads add to and the loop takes (and so resets)."""

    __slots__ = ("_count", "_lock")

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def add(self, amount: int = 1) -> None:
        with self._lock:
            self._count += amount

    def take(self) -> int:
        if not self._count:  # asked before every message: no lock for the usual answer
            return 0
        with self._lock:
            count, self._count = self._count, 0
        return count


class Slot:
    """One started message's place among its loop's slots, given back once: when its task ends,
    or earlier, by the time limit, when its handler overran and the message was settled."""

    __slots__ = ("_in_flight", "given_back")

    def __init__(self, in_flight: InFlight) -> None:
        self._in_flight = in_flight
        self.given_back = False

    def give_back(self) -> None:
        self._in_flight._give_back(self)


_current_slot: ContextVar[Slot | None] = ContextVar("cloudqueue_slot", default=None)


def current_slot() -> Slot | None:
    """The slot of the message this handler thread is working on (None when handled inline)."""
    return _current_slot.get()


class InFlight:
    """One receive loop's slots: at most ``limit()`` of its messages handled at once.

    ``limit`` is asked before each message (``slots_per_loop`` of the listener's measured handler
    time); without one the loop uses its full ``concurrency``. ``inline`` (by default with one
    slot) has the loop handle each message itself; a listener with time limits never does, so
    that a handler past its limit holds a slot, not the loop.
    """

    def __init__(
        self,
        concurrency: int,
        pool: HandlerPool,
        limit: Callable[[], int] | None = None,
        *,
        inline: bool | None = None,
        follow_on: FollowOn | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self._inline = concurrency == 1 if inline is None else inline
        self._pool = pool
        self._limit = limit or (lambda: concurrency)
        self._in_use = 0
        self._released = threading.Condition()
        self._failures = _Tally()
        self._follow_on = follow_on
        self._followed = _Tally()
        """Messages handler threads took on from the hand-off since ``take_followed``."""
        self._closing = False

    @property
    def inline(self) -> bool:
        """True when the receive loop handles each message itself (no hand-over cost)."""
        return self._inline

    @property
    def in_use(self) -> int:
        """Slots reserved now: messages started (or about to be) and not yet settled."""
        with self._released:
            return self._in_use

    def reserve(self) -> None:
        """Wait for a free slot: the loop takes no message it could not start at once."""
        if self.inline:
            return
        with self._released:
            while self._in_use >= max(1, min(self.concurrency, self._limit())):
                self._pool.loop_waits(+1)
                try:
                    self._released.wait()
                finally:
                    self._pool.loop_waits(-1)
            self._in_use += 1

    def cancel(self) -> None:
        """Give back a reserved slot that no message was started in."""
        if not self.inline:
            self._free_slot()

    def start(self, task: Callable[[], bool]) -> bool:
        """Run ``task`` in the reserved slot: now (inline), or on a handler thread.

        ``task`` returns False when something unexpected failed. Inline that is returned at
        once; otherwise it is counted for the loop to see (``take_failures``) and True returned.
        """
        if self.inline:
            return task()
        self._pool.submit(lambda: self._run(task))
        return True

    def take_failures(self) -> int:
        """Unexpected failures of this loop's tasks since the last call."""
        return self._failures.take()

    def take_followed(self) -> int:
        """Messages handler threads took on from the hand-off since the last call."""
        return self._followed.take()

    def drain(self) -> None:
        """Wait until every message this loop started has been settled (and take on no more)."""
        self._closing = True
        with self._released:
            while self._in_use:
                self._released.wait()

    def _run(self, task: Callable[[], bool]) -> None:
        slot = Slot(self)
        _current_slot.set(slot)
        try:
            next_task: Callable[[], bool] | None = task
            followed, follow_on = 0, self._follow_on
            while next_task is not None:
                if not self._succeeded(next_task):
                    break  # the loop must see the failure (and back off) before more
                if follow_on is None or not self._may_take_more(slot, followed):
                    break
                next_task = follow_on()
                if next_task is not None:
                    followed += 1
            if followed:
                self._followed.add(followed)
        finally:
            _current_slot.set(None)
            self._give_back(slot)

    def _may_take_more(self, slot: Slot, followed: int) -> bool:
        """Whether the thread of this run may take on the next waiting message: not once a time
        limit gave its slot back (it holds none any more), nor while the loop is leaving, nor
        past a batch (the loop then counts, looks at its limits and fetches)."""
        return not (slot.given_back or self._closing or followed == MAX_FOLLOW_ONS)

    def _succeeded(self, task: Callable[[], bool]) -> bool:
        succeeded = False
        try:
            succeeded = task()
        except BaseException:  # pragma: no cover - the listener's task catches what it can
            log.critical("in_flight_task_crashed", exc_info=True)
        if not succeeded:
            self._failures.add()
        return succeeded

    def _give_back(self, slot: Slot) -> None:
        with self._released:
            if slot.given_back:  # the time limit gave it back already
                return
            slot.given_back = True
            self._in_use -= 1
            self._released.notify_all()

    def _free_slot(self) -> None:
        with self._released:
            self._in_use -= 1
            self._released.notify_all()

    def __repr__(self) -> str:
        return f"InFlight(concurrency={self.concurrency}, in_use={self.in_use})"
