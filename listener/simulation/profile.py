"""A recorded workload: what a queue saw, minute by minute, in an append-only JSON-lines file.

``cloudqueue run --record FILE`` (or a producer's ``Publisher(recorder=...)``) writes it; ``tune``,
``simulate --profile`` and ``replay`` read it. Each line is one JSON object:

* a header, ``{"cloudqueue_profile": 1, "handler_ms_bounds": [...], "size_bytes_bounds": [...]}``,
  written whenever a recorder opens the file (a restarted worker appends to the same file);
* one line per minute and source, ``{"minute": 29412345, "arrivals": [[second, count], ...],
  "handled": n, "failed": n, "handler_ms": [counts], "size_bytes": [counts]}``, the minute being
  minutes since the Unix epoch, seconds counted within it.

Arrivals are counted by the second the message was put (its insertion time, as storage reports
it: Azure's has whole seconds), handling by the minute it ended. Lines for the same minute add up
(a worker and a producer may both write one; a message put a minute before its handling lands in
its own minute's line later). Handling times and sizes are histograms over fixed bounds, so a
busy day stays at one line a minute. The hand-made ``minute,count`` CSV day profiles that
``simulate --profile`` always took are read too.
"""

from __future__ import annotations

import bisect
import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.simulation.report import ServiceModel, nearest_rank
from cloudqueue.listener.simulation.workload import Workload, read_day_profile

FORMAT_VERSION = 1
HANDLER_MS_BOUNDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000)
"""Upper bounds (ms) of the handling-time buckets; one more bucket holds everything above."""
SIZE_BYTES_BOUNDS = (256, 1_024, 4_096, 16_384, 49_152, 65_536)
FLUSH_AFTER_S = 120.0
"""A minute's counts are written once it is this old: late first deliveries of messages put in
it still land in its line, and a crash loses at most this much."""
FLUSH_CHECK_EVERY_S = 10.0
MAX_OBSERVED_TIMES = 2_000
"""Handling times the empirical service model keeps (drawn in the histogram's proportions)."""


@dataclass(slots=True)
class _Minute:
    arrivals: Counter[int] = field(default_factory=Counter)
    handled: int = 0
    failed: int = 0
    handler_ms: list[int] = field(default_factory=lambda: [0] * (len(HANDLER_MS_BOUNDS) + 1))
    size_bytes: list[int] = field(default_factory=lambda: [0] * (len(SIZE_BYTES_BOUNDS) + 1))

    def to_json(self, minute: int) -> dict[str, Any]:
        return {
            "minute": minute,
            "arrivals": sorted([second, count] for second, count in self.arrivals.items()),
            "handled": self.handled,
            "failed": self.failed,
            "handler_ms": self.handler_ms,
            "size_bytes": self.size_bytes,
        }


class ProfileRecorder:
    """Counts arrivals and handling per minute and appends each minute's line once it is old.

    Thread-safe: dequeue threads and a producer may share one. ``close()`` writes what is left.
    """

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._minutes: dict[int, _Minute] = {}
        self._next_check_s = 0.0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._write(
            {
                "cloudqueue_profile": FORMAT_VERSION,
                "handler_ms_bounds": list(HANDLER_MS_BOUNDS),
                "size_bytes_bounds": list(SIZE_BYTES_BOUNDS),
            }
        )

    def arrived(self, at: datetime, count: int = 1) -> None:
        """``count`` messages were put at ``at`` (a producer's put, or a first delivery's
        insertion time)."""
        epoch_s = math.floor(at.timestamp())
        with self._lock:
            self._minute(epoch_s // 60).arrivals[epoch_s % 60] += count
        self._maybe_flush()

    def handled(self, duration_s: float, *, size_bytes: int, failed: bool) -> None:
        """One delivery's handling ended now, after ``duration_s``; ``failed`` if it raised."""
        bucket = bisect.bisect_left(HANDLER_MS_BOUNDS, duration_s * 1_000)
        size_bucket = bisect.bisect_left(SIZE_BYTES_BOUNDS, size_bytes)
        with self._lock:
            minute = self._minute(math.floor(self._clock()) // 60)
            minute.handler_ms[bucket] += 1
            minute.size_bytes[size_bucket] += 1
            if failed:
                minute.failed += 1
            else:
                minute.handled += 1
        self._maybe_flush()

    def close(self) -> None:
        """Write every minute still held, then close the file."""
        with self._lock:
            self._flush(older_than=None)
            self._file.close()

    def _minute(self, minute: int) -> _Minute:
        found = self._minutes.get(minute)
        if found is None:
            found = self._minutes[minute] = _Minute()
        return found

    def _maybe_flush(self) -> None:
        now_s = self._clock()
        if now_s < self._next_check_s:
            return
        with self._lock:
            self._next_check_s = now_s + FLUSH_CHECK_EVERY_S
            self._flush(older_than=(now_s - FLUSH_AFTER_S) // 60)

    def _flush(self, *, older_than: float | None) -> None:
        for minute in sorted(self._minutes):
            if older_than is not None and minute >= older_than:
                break
            self._write(self._minutes.pop(minute).to_json(minute))
        self._file.flush()

    def _write(self, line: dict[str, Any]) -> None:
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")

    def __repr__(self) -> str:
        return f"ProfileRecorder({str(self.path)!r}, minutes_held={len(self._minutes)})"


@dataclass(frozen=True, slots=True)
class RecordedProfile:
    """A profile read back: arrivals per second, and what handling looked like."""

    arrivals: dict[int, int]
    """Messages put, by Unix second."""
    handler_ms: tuple[int, ...]
    size_bytes: tuple[int, ...]
    handled: int
    failed: int
    first_minute: int
    last_minute: int

    @property
    def messages(self) -> int:
        return sum(self.arrivals.values())

    @property
    def duration_s(self) -> float:
        return float((self.last_minute - self.first_minute + 1) * 60)

    @property
    def failure_rate(self) -> float:
        deliveries = self.handled + self.failed
        return self.failed / deliveries if deliveries else 0.0

    def workload(self) -> Workload:
        """The arrivals as seconds from the start of the first recorded minute."""
        start_s = self.first_minute * 60
        arrivals = sorted(
            float(second - start_s) for second, count in self.arrivals.items() for _ in range(count)
        )
        return Workload(tuple(arrivals), self.duration_s)

    def service(self, *, request_latency_s: float) -> ServiceModel | None:
        """The observed handling times as an empirical model (None: nothing was handled)."""
        observed = _representative_times_s(self.handler_ms)
        if not observed:
            return None
        return ServiceModel(
            service_s=sum(observed) / len(observed),
            distribution="empirical",
            request_latency_s=request_latency_s,
            failure_rate=self.failure_rate,
            observed_s=observed,
        )

    def handler_percentile_ms(self, percent: float) -> float | None:
        """A handling-time percentile, to the bucket's representative time."""
        value = nearest_rank(sorted(_representative_times_s(self.handler_ms)), percent)
        return None if value is None else value * 1_000

    def size_percentile_bytes(self, percent: float) -> int | None:
        """The bucket bound that ``percent`` % of the recorded message sizes stay within."""
        total = sum(self.size_bytes)
        if total == 0:
            return None
        rank, seen = math.ceil(percent / 100 * total), 0
        for bucket, count in enumerate(self.size_bytes):
            seen += count
            if seen >= rank:
                return SIZE_BYTES_BOUNDS[min(bucket, len(SIZE_BYTES_BOUNDS) - 1)]
        return SIZE_BYTES_BOUNDS[-1]


def _bucket_time_s(bucket: int) -> float:
    """A bucket's representative handling time: the geometric middle of its bounds."""
    upper_ms = HANDLER_MS_BOUNDS[min(bucket, len(HANDLER_MS_BOUNDS) - 1)]
    lower_ms = HANDLER_MS_BOUNDS[bucket - 1] if bucket > 0 else 0.0
    if bucket >= len(HANDLER_MS_BOUNDS):  # above the last bound: take the bound itself
        return upper_ms / 1_000
    return (math.sqrt(lower_ms * upper_ms) if lower_ms else upper_ms / 2) / 1_000


def _representative_times_s(counts: Iterable[int]) -> tuple[float, ...]:
    """Up to ``MAX_OBSERVED_TIMES`` handling times in the histogram's proportions."""
    counts = list(counts)
    total = sum(counts)
    if total == 0:
        return ()
    scale = min(1.0, MAX_OBSERVED_TIMES / total)
    times: list[float] = []
    for bucket, count in enumerate(counts):
        times.extend([_bucket_time_s(bucket)] * max(1 if count else 0, round(count * scale)))
    return tuple(times)


def read_profile(path: Path) -> RecordedProfile:
    """Read a recorded profile; ConfigurationError (naming the line) when it is not one."""
    arrivals: Counter[int] = Counter()
    handler_ms = [0] * (len(HANDLER_MS_BOUNDS) + 1)
    size_bytes = [0] * (len(SIZE_BYTES_BOUNDS) + 1)
    handled = failed = 0
    minutes: list[int] = []
    with path.open(encoding="utf-8") as file:
        for number, text in enumerate(file, start=1):
            if not text.strip():
                continue
            line = _parse_line(path, number, text)
            if "cloudqueue_profile" in line:
                _check_header(path, number, line)
                continue
            try:
                minute = _whole(line["minute"])
                for second, count in line["arrivals"]:
                    if not 0 <= _whole(second) < 60:
                        raise ValueError("second out of range")
                    arrivals[minute * 60 + _whole(second)] += _whole(count)
                handled += _whole(line["handled"])
                failed += _whole(line["failed"])
                _add(handler_ms, line["handler_ms"])
                _add(size_bytes, line["size_bytes"])
            except (KeyError, TypeError, ValueError) as error:
                raise ConfigurationError(f"{path}:{number}: not a profile line ({error})") from None
            minutes.append(minute)
    if not minutes:
        raise ConfigurationError(f"{path}: the profile holds no minute yet")
    return RecordedProfile(
        arrivals=dict(arrivals),
        handler_ms=tuple(handler_ms),
        size_bytes=tuple(size_bytes),
        handled=handled,
        failed=failed,
        first_minute=min(minutes),
        last_minute=max(minutes),
    )


def _parse_line(path: Path, number: int, text: str) -> dict[str, Any]:
    try:
        line = json.loads(text)
    except ValueError:
        raise ConfigurationError(f"{path}:{number}: not JSON") from None
    if not isinstance(line, dict):
        raise ConfigurationError(f"{path}:{number}: expected a JSON object")
    return line


def _check_header(path: Path, number: int, line: dict[str, Any]) -> None:
    if line.get("cloudqueue_profile") != FORMAT_VERSION or (
        line.get("handler_ms_bounds") != list(HANDLER_MS_BOUNDS)
        or line.get("size_bytes_bounds") != list(SIZE_BYTES_BOUNDS)
    ):
        raise ConfigurationError(
            f"{path}:{number}: a profile of another format version (this cloudqueue reads "
            f"version {FORMAT_VERSION})"
        )


def _whole(value: Any) -> int:
    """A JSON count: an int, never a bool or a float."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a whole number >= 0, got {value!r}")
    return value


def _add(totals: list[int], counts: Any) -> None:
    if not isinstance(counts, list) or len(counts) != len(totals):
        raise ValueError(f"expected {len(totals)} bucket counts")
    for bucket, count in enumerate(counts):
        totals[bucket] += _whole(count)


@dataclass(frozen=True, slots=True)
class LoadedProfile:
    """What a tuning or replay needs of a profile file, whichever format it was."""

    workload: Workload
    recorded: RecordedProfile | None
    """None for a hand-made ``minute,count`` CSV: no handling times, sizes or failures."""


def load_profile(path: Path) -> LoadedProfile:
    """A recorded JSON-lines profile, or a hand-made ``minute,count`` CSV day profile."""
    with path.open(encoding="utf-8", errors="replace") as file:
        first = file.readline().strip()
    if first.startswith("{"):
        recorded = read_profile(path)
        return LoadedProfile(recorded.workload(), recorded)
    return LoadedProfile(read_day_profile(path), None)
