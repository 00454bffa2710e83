"""Is this process CPU-saturated? More threads would then only add contention.

Python threads share one interpreter lock, so a process whose threads run Python code cannot use
much more than one core: the default threshold is 90 % of one core. Handlers that spend their time
in C code that releases the lock (compression, numpy) or in I/O stay below it and may scale.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class CpuMeter(Protocol):
    """Reports the cores this process used since the previous call."""

    def cores_used(self) -> float | None:
        """Cores used since the previous call; None on the first, which only starts the window."""


class ProcessCpuMeter:
    """Process CPU time over wall time between calls (1.0 = one core fully busy).

    The first window opens at the first call, not when the meter is made: made with the scaler,
    before the worker's start-up (its ``on_start``, queue creation, imports on first use), a
    window from then would measure start-up, not the load, and refuse the first scale-up.
    """

    def __init__(
        self,
        *,
        cpu_time: Callable[[], float] = time.process_time,
        wall_time: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cpu_time = cpu_time
        self._wall_time = wall_time
        self._lock = threading.Lock()
        self._last: tuple[float, float] | None = None

    def cores_used(self) -> float | None:
        with self._lock:
            cpu, wall = self._cpu_time(), self._wall_time()
            last, self._last = self._last, (cpu, wall)
        if last is None:
            return None
        last_cpu, last_wall = last
        elapsed = wall - last_wall
        return (cpu - last_cpu) / elapsed if elapsed > 0 else 0.0
