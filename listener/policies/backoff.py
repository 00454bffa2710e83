"""Randomized exponential back-off, as a pure function.

``delta = (2**attempt - 1) * U(0.8 * delta_s, 1.2 * delta_s)`` and
``delay = min(min_s + delta, max_s)``: the design's curve. The jitter keeps a fleet of threads
that went idle (or hit the same outage) together from polling in lock-step.
"""

from __future__ import annotations

import random
from typing import Protocol

# 2**63 already exceeds any sensible cap; clamping the exponent avoids float overflow.
_MAX_EXPONENT = 62


class RandomSource(Protocol):
    """What the back-off needs of a random generator (``random.Random`` fits)."""

    def uniform(self, a: float, b: float) -> float: ...


def randomized_exponential_backoff(
    attempt: int,
    *,
    delta_s: float,
    min_s: float,
    max_s: float,
    rng: RandomSource,
) -> float:
    """The delay before the next try after ``attempt`` consecutive misses (attempt >= 1)."""
    if attempt <= 0:
        return min_s
    growth = 2.0 ** min(attempt, _MAX_EXPONENT) - 1.0
    delta = growth * rng.uniform(0.8 * delta_s, 1.2 * delta_s)
    return min(min_s + delta, max_s)


def default_rng() -> random.Random:
    """A fresh, unseeded generator (tests pass a seeded one instead)."""
    return random.Random()
