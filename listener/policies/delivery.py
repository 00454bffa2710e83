"""Delivery policy: when a failed message is retried, and when it is given up on.

Pure functions of the dequeue count, so the retry curve and the poison threshold are easy to
state and to test. A handler can also give up at once by raising ``PermanentFailure``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.policies.backoff import RandomSource, randomized_exponential_backoff
from cloudqueue.listener.queue_limits import MAX_VISIBILITY_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """Retries, poisoning and visibility renewal for one listener."""

    max_dequeue_count: int = 5
    """Poison a message once it has been delivered this many times without success."""
    retry_delay_s: float = 1.0
    """Base of the retry back-off: ~1 s, ~3 s, ~7 s, ~15 s... after the 1st, 2nd, 3rd... failure."""
    max_retry_delay_s: float = 60.0
    renew_visibility: bool = True
    """Extend the visibility of held messages at half their timeout while they are handled."""
    max_hop_s: int = MAX_VISIBILITY_TIMEOUT_S
    """The longest a message delayed beyond 7 days is hidden again when it shows up early (7 days:
    Azure's cap, the fewest hops; ``cloudqueue.listener.consumer.hops``). Lower only to watch hops
    happen."""
    retry_delays_s: tuple[float, ...] = ()
    """Seconds hidden after the 1st, 2nd... failure, the last repeating (a worker's ``Retry``);
    empty: the exponential back-off above."""

    def __post_init__(self) -> None:
        if self.max_dequeue_count < 1:
            raise ConfigurationError("max_dequeue_count must be at least 1")
        if self.retry_delay_s < 0 or self.max_retry_delay_s < self.retry_delay_s:
            raise ConfigurationError("need 0 <= retry_delay_s <= max_retry_delay_s")
        if not 1 <= self.max_hop_s <= MAX_VISIBILITY_TIMEOUT_S:
            raise ConfigurationError(
                f"max_hop_s must be 1..{MAX_VISIBILITY_TIMEOUT_S} (7 days), got {self.max_hop_s}"
            )
        if not all(math.isfinite(delay) and delay >= 0 for delay in self.retry_delays_s):
            raise ConfigurationError(f"retry_delays_s must be >= 0, got {self.retry_delays_s}")


def retry_visibility_s(dequeue_count: int, policy: DeliveryPolicy, rng: RandomSource) -> int:
    """Whole seconds a failed message stays hidden before its next attempt (0 = at once)."""
    delays = policy.retry_delays_s
    if delays:
        # Rounded up, so a delay is never cut short: visibility takes whole seconds.
        return math.ceil(delays[min(max(dequeue_count, 1), len(delays)) - 1])
    delay = randomized_exponential_backoff(
        dequeue_count,
        delta_s=policy.retry_delay_s or 1.0,
        min_s=0.0,
        max_s=policy.max_retry_delay_s,
        rng=rng,
    )
    return 0 if policy.retry_delay_s == 0 else math.ceil(delay)


def exhausted(dequeue_count: int, policy: DeliveryPolicy) -> bool:
    """True when this delivery was the last one allowed."""
    return dequeue_count >= policy.max_dequeue_count
