"""Rate limits as pure functions: the token bucket, and the threads a limit can keep busy.

The bucket is kept as GCRA (the generic cell rate algorithm): a token bucket written in time
instead of tokens. Its whole state is one number, the *theoretical arrival time* (``tat_s``): when
the bucket will next hold a full token at the current pace. ``burst`` tokens of capacity become a
tolerance of ``(burst - 1)`` emission intervals, and a caller's wait is how far ``tat_s`` lies
beyond that tolerance. One number is why it suits Redis (one key, one atomic script) as well as a
lock in one process: the Redis script in ``cloudqueue.listener.limits.redis_limiter`` is this
function.

Every call *reserves*: it takes the next slot and says how long to wait for it, so concurrent
callers line up one interval apart instead of all waking and racing for the same token. A caller
that gives up its slot (the listener stopped) only makes the rate lower, never higher.

A new bucket starts empty rather than full, so a worker (or a fleet) that starts or restarts
paces from its first message instead of bursting; the burst builds up only while it idles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cloudqueue.listener.errors import ConfigurationError

DEFAULT_BURST_S = 0.05
"""Burst capacity, in seconds of the limit: enough to absorb a late wake-up (scheduling jitter,
the GIL) without losing pace, small enough that the rate over any second stays within 5 %."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """One caller's slot: how long it must wait, and the bucket's state after it."""

    wait_s: float
    tat_s: float


def default_burst(max_messages_per_s: float) -> int:
    """The burst capacity for a limit: ``DEFAULT_BURST_S`` worth of messages, at least one."""
    return max(1, math.floor(max_messages_per_s * DEFAULT_BURST_S))


def check_limit(max_messages_per_s: float, burst: int) -> None:
    """Raise ConfigurationError unless the limit is positive and the burst at least one."""
    if not max_messages_per_s > 0 or not math.isfinite(max_messages_per_s):
        raise ConfigurationError(f"max_messages_per_s must be > 0, got {max_messages_per_s}")
    if burst < 1:
        raise ConfigurationError(f"burst must be >= 1, got {burst}")


def reserve(
    tat_s: float | None, *, now_s: float, max_messages_per_s: float, burst: int
) -> Reservation:
    """Reserve the next slot of a bucket whose state is ``tat_s`` (None: a new, empty bucket)."""
    interval_s = 1.0 / max_messages_per_s
    tolerance_s = (burst - 1) * interval_s
    start_s = now_s + tolerance_s if tat_s is None else tat_s
    wait_s = max(0.0, start_s - tolerance_s - now_s)
    return Reservation(wait_s=wait_s, tat_s=max(start_s, now_s) + interval_s)


def threads_for_limit(max_messages_per_s: float, per_thread_rate_per_s: float | None) -> int | None:
    """The most dequeue threads a limit can keep busy; None when nothing is measured yet.

    A thread that needs ``1 / per_thread_rate_per_s`` seconds per message (its own work, waits
    for the limit excluded) serves that many messages a second; Little's law gives
    ``limit x seconds per message`` threads, plus one so a thread's storage round trip between
    batches does not leave the limit unused. Any more would only wait for the limit.
    """
    if per_thread_rate_per_s is None or per_thread_rate_per_s <= 0:
        return None
    return math.ceil(max_messages_per_s / per_thread_rate_per_s) + 1


def capped_by_limit(
    wanted: int, max_messages_per_s: float | None, *, per_thread_rate_per_s: float | None
) -> int:
    """A scaling rule's thread count, lowered to what the rate limit keeps busy (if any)."""
    if max_messages_per_s is None:
        return wanted
    cap = threads_for_limit(max_messages_per_s, per_thread_rate_per_s)
    return wanted if cap is None else min(wanted, cap)
