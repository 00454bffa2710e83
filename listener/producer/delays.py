"""How a publish call's delay and time-to-live become a put's
(``cloudqueue.listener.producer.publisher``).

A delay of up to ``max_hop_s`` (7 days: Azure's cap on a put's visibility delay) is the put's
own. A longer one goes in hops: the message is put hidden for ``max_hop_s`` with its due time in
its envelope (``cloudqueue.listener.wire.due``), and each time it shows up before then a listener
hides it again, for the rest of the delay or another ``max_hop_s``
(``cloudqueue.listener.consumer.hops``).

Time-to-live: without one, a delayed message lives 7 days (Azure's default) after it is due, as
an undelayed one lives 7 days after its put, so no delay outlives its message. One given counts
from the put, as Azure's does, and must be longer than the delay.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cloudqueue.listener.stores.storage import (
    DEFAULT_TIME_TO_LIVE_S,
    MAX_VISIBILITY_TIMEOUT_S,
    NEVER_EXPIRES,
    check_put_times,
)
from cloudqueue.listener.wire.due import due_time

MAX_HOP_S = MAX_VISIBILITY_TIMEOUT_S
"""The longest one hop hides a message: Azure's 7 days, the fewest hops (lower it only to watch
hops happen on real time, in a test)."""


@dataclass(frozen=True, slots=True)
class Timing:
    """When the messages of one publish call become visible and when they expire."""

    delay_s: int
    """The whole delay."""
    visibility_delay_s: int
    """The put's own delay: the whole delay, or the first hop of a longer one."""
    time_to_live_s: int | None
    due: datetime | None = None
    """When a delay longer than one hop ends (None for a delay the put covers)."""


def delay_seconds(delay_s: int, delay: timedelta | None) -> int:
    """The delay a publish call asks for, given as ``delay_s`` or as ``delay`` (a timedelta,
    rounded up to the whole second Azure counts in). ValueError when both are given."""
    if delay is None:
        return delay_s
    if not isinstance(delay, timedelta):
        raise ValueError(f"delay must be a timedelta, got {delay!r}")
    if delay_s:
        raise ValueError("give the delay as delay or as delay_s, not both")
    whole, part = divmod(delay, timedelta(seconds=1))
    return whole + (1 if part else 0)


def plan_timing(
    delay_s: int, time_to_live_s: int | None, *, now: datetime, max_hop_s: int = MAX_HOP_S
) -> Timing:
    """The put's timing for a delay (any length, whole seconds) and a time-to-live (None: 7 days
    after the delay ends); ValueError naming the value that is out of range."""
    if isinstance(delay_s, bool) or not isinstance(delay_s, int):
        raise ValueError(f"delay_s must be a whole number of seconds, got {delay_s!r}")
    if delay_s < 0:
        raise ValueError(f"delay_s must be >= 0, got {delay_s}")
    ttl_s = time_to_live_s
    if ttl_s is None and delay_s:
        ttl_s = delay_s + DEFAULT_TIME_TO_LIVE_S
    if ttl_s is not None and ttl_s != NEVER_EXPIRES and 1 <= ttl_s <= delay_s:
        raise ValueError(
            f"delay_s ({delay_s}) must be less than time_to_live_s ({ttl_s}): the message "
            "would expire before it is due"
        )
    hops = delay_s > max_hop_s
    visibility_s = max_hop_s if hops else delay_s
    check_put_times(ttl_s, visibility_s)
    return Timing(delay_s, visibility_s, ttl_s, due_time(now, delay_s) if hops else None)


def check_max_hop_s(max_hop_s: int) -> int:
    """Return ``max_hop_s`` if it is a hop Azure allows (1 s to 7 days); ValueError if not."""
    if isinstance(max_hop_s, bool) or not isinstance(max_hop_s, int):
        raise ValueError(f"max_hop_s must be a whole number of seconds, got {max_hop_s!r}")
    if not 1 <= max_hop_s <= MAX_VISIBILITY_TIMEOUT_S:
        raise ValueError(
            f"max_hop_s must be 1..{MAX_VISIBILITY_TIMEOUT_S} (7 days), got {max_hop_s}"
        )
    return max_hop_s


__all__ = ["MAX_HOP_S", "Timing", "check_max_hop_s", "delay_seconds", "plan_timing"]
