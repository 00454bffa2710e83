"""The randomized exponential back-off curve, with a seeded random source."""

from __future__ import annotations

import random

import pytest

from cloudqueue.listener import randomized_exponential_backoff


@pytest.mark.parametrize("attempt", range(1, 13))
def test_each_delay_lies_in_the_jitter_band_of_the_curve(attempt: int) -> None:
    """delay = min_s + (2^n - 1) * U(0.8, 1.2) * delta, inside its ±20% band."""
    delay = randomized_exponential_backoff(
        attempt, delta_s=0.1, min_s=0.0, max_s=1e9, rng=random.Random(attempt)
    )
    nominal = (2**attempt - 1) * 0.1
    assert 0.8 * nominal <= delay <= 1.2 * nominal


def test_the_delay_is_capped_and_a_reset_starts_from_the_minimum() -> None:
    """Past the cap the delay stays at max_s; attempt 0 (after a success) is min_s."""
    rng = random.Random(1)
    assert randomized_exponential_backoff(40, delta_s=0.1, min_s=0.5, max_s=60, rng=rng) == 60
    assert randomized_exponential_backoff(0, delta_s=0.1, min_s=0.5, max_s=60, rng=rng) == 0.5
    assert randomized_exponential_backoff(10_000, delta_s=0.1, min_s=0, max_s=60, rng=rng) == 60
