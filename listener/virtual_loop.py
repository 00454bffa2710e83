"""An asyncio event loop on a ``VirtualClock``: ``asyncio.sleep`` in a test takes no real time.

An ``async def`` handler's waits are the event loop's timers, on the loop's own clock
(``loop.time()``), not on the listener's sleeper. Here ``time()`` reads the virtual clock, and
the loop's idle wait -- the selector's ``select(timeout)``, which asyncio calls with the time
left to its next timer -- counts as a wait on that clock: the loop thread is one more thread the
clock sees waiting, until virtual time reaches its next timer (or for good, when it has none).
``cloudqueue.workers.testing.run_until_drained`` then moves time to the earliest wake-up of all
its threads, so 50 coroutines each awaiting 0.2 s on 8 slots finish in 1.4 s of virtual time.

The loop still watches its file descriptors for real, polling them every ``STOP_POLL_S`` of real
time while it waits: a coroutine submitted from another thread, or real I/O, wakes it as usual.
An idle wait first waits ``REAL_QUIET_S`` of real time for I/O before it counts as a wait on the
clock, as trio's autojump threshold does: a handler calling a real server (a test server on
localhost) would otherwise see time jump to its next timer -- the client's own timeout -- while
the connection or the reply is on its way, and time out in no real time at all.
"""

from __future__ import annotations

import asyncio
import selectors

from cloudqueue.listener.testing import STOP_POLL_S, VirtualClock

Ready = list[tuple[selectors.SelectorKey, int]]

REAL_QUIET_S = 0.1
"""Real seconds without I/O before an idle wait lets virtual time move."""


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is ``clock``'s and whose idle waits are waits on it."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(_VirtualSelector(clock))
        self._virtual_clock = clock

    def time(self) -> float:
        return self._virtual_clock.monotonic()


class _VirtualSelector(selectors.DefaultSelector):
    """Waits for I/O in real time, for timers in virtual time."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> Ready:
        ready: Ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready  # work to do: the loop is not waiting
        ready = super().select(REAL_QUIET_S)
        if ready:
            return ready  # real I/O came (a reply, a connection, an executor's result)
        with self._clock.watching(timeout) as ended:
            while not ready and not ended():
                ready = super().select(STOP_POLL_S)
        return ready


__all__ = ["VirtualTimeLoop"]
