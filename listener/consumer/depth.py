"""The depth a listener last knew of its queue, and how old that knowledge is.

Two things tell a listener how many messages wait, and neither costs an extra transaction: the
count its scaler takes (``measure_load``: visible = the approximate count less the messages this
listener holds), and an empty get while it holds none (nothing is visible: 0). The status line,
``/metrics`` and the live state read the last of these with its age, so a figure is either fresh
or says how old it is. A refresher (``cloudqueue.workers.host.depth_refresh``) counts again while
work flows.

On a partitioned queue a get reads one partition: its 0 holds until the next get that finds
work, which counts again (``queue_work_detected``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudqueue.listener.clock import Clock


@dataclass(frozen=True, slots=True)
class DepthReading:
    """Messages visible in the queue, as last measured, and when (monotonic seconds)."""

    visible: int
    measured_at_s: float
    source: str
    """``count`` (a storage count) or ``empty_get`` (a get that found nothing)."""

    def age_s(self, now_s: float) -> float:
        return max(0.0, now_s - self.measured_at_s)


class KnownDepth:
    """The latest ``DepthReading`` of one queue; written by dequeue threads, read by anyone.

    No lock: replacing one immutable reading is atomic, and the latest writer wins.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._reading: DepthReading | None = None

    def counted(self, visible: int) -> None:
        """A count says ``visible`` messages wait."""
        self._reading = DepthReading(visible, self._clock.monotonic(), "count")

    def emptied(self) -> None:
        """A get found nothing: none waits."""
        self._reading = DepthReading(0, self._clock.monotonic(), "empty_get")

    def reading(self) -> DepthReading | None:
        """The last reading (None before any count or empty get)."""
        return self._reading

    def age_s(self) -> float | None:
        """Seconds since the last reading (None before any)."""
        reading = self._reading
        return None if reading is None else reading.age_s(self._clock.monotonic())

    def __repr__(self) -> str:
        return f"KnownDepth({self._reading!r})"
