"""Workloads: when messages arrive, over how long, and how many days that stands for.

A workload is a sorted list of arrival times (seconds from the start) and a duration. Messages
that arrive at the same instant were put by one producer call: a push-mode producer announces
them with one trigger (the publisher's ``per_batch`` mode). Pieces chain with ``then``, so a day
can be built from idle stretches, bursts and steady traffic.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from cloudqueue.listener.errors import ConfigurationError

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Workload:
    """Arrivals (seconds from the start, sorted) within ``duration_s``."""

    arrivals_s: tuple[float, ...]
    duration_s: float
    days: float | None = None
    """How many days the simulated stretch stands for (None: ``duration_s`` / 24 h). The design's
    table simulates only a day's 22 idle hours and calls that the day's cost."""

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ConfigurationError(f"a workload needs a positive duration, got {self.duration_s}")
        if any(not 0 <= t <= self.duration_s for t in self.arrivals_s):
            raise ConfigurationError("every arrival must fall within the workload's duration")

    @property
    def day_count(self) -> float:
        return self.days if self.days is not None else self.duration_s / DAY_S

    def then(self, other: Workload) -> Workload:
        """This workload followed by ``other``."""
        shifted = tuple(self.duration_s + t for t in other.arrivals_s)
        return Workload(self.arrivals_s + shifted, self.duration_s + other.duration_s)

    def window(self, start_s: float, duration_s: float) -> Workload:
        """The stretch from ``start_s`` lasting ``duration_s`` (cut at the end), from zero."""
        end_s = min(self.duration_s, start_s + duration_s)
        if not 0 <= start_s < end_s:
            raise ConfigurationError(
                f"a window from {start_s:g} s must start within the workload's "
                f"{self.duration_s:g} s and last a while"
            )
        arrivals = tuple(t - start_s for t in self.arrivals_s if start_s <= t < end_s)
        return Workload(arrivals, end_s - start_s)

    def as_day(self) -> Workload:
        """The same arrivals, counted as one whole day (per-day figures are not scaled)."""
        return Workload(self.arrivals_s, self.duration_s, days=1.0)


def idle(duration_s: float) -> Workload:
    """A stretch with no messages at all."""
    return Workload((), duration_s)


def constant(rate_per_s: float, duration_s: float) -> Workload:
    """Evenly spaced messages at ``rate_per_s``."""
    if rate_per_s <= 0:
        raise ConfigurationError(f"rate_per_s must be positive, got {rate_per_s}")
    count = math.floor(rate_per_s * duration_s)
    return Workload(tuple(i / rate_per_s for i in range(count)), duration_s)


def bursts(size: int, period_s: float, duration_s: float) -> Workload:
    """``size`` messages put at once at the start of every ``period_s``."""
    if size <= 0 or period_s <= 0:
        raise ConfigurationError("bursts need size > 0 and period_s > 0")
    starts = [i * period_s for i in range(math.ceil(duration_s / period_s))]
    return Workload(tuple(t for t in starts for _ in range(size)), duration_s)


def day_profile(rows: list[tuple[int, int]]) -> Workload:
    """A day from (minute of the day, message count) rows, spread evenly within each minute."""
    arrivals: list[float] = []
    for minute, count in sorted(rows):
        if not 0 <= minute < 1440 or count < 0:
            raise ConfigurationError(
                f"bad profile row ({minute}, {count}): minute 0..1439, count >= 0"
            )
        arrivals.extend(minute * 60.0 + 60.0 * i / count for i in range(count))
    return Workload(tuple(arrivals), DAY_S)


def read_day_profile(path: Path) -> Workload:
    """A day profile from a CSV file with a ``minute,count`` header."""
    with path.open(newline="", encoding="utf-8") as file:
        reader = csv.DictReader(file)
        if reader.fieldnames is None or not {"minute", "count"} <= set(reader.fieldnames):
            raise ConfigurationError(f"{path}: expected a CSV with the header minute,count")
        try:
            rows = [(int(row["minute"]), int(row["count"])) for row in reader]
        except ValueError as error:
            raise ConfigurationError(f"{path}: {error}") from None
    return day_profile(rows)
