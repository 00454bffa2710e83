"""The idle cost of a worker on K queues, in virtual time with the real listener and scaler.

Calls are counted, not timed: an idle hour in virtual time takes a fraction of a second, and the
figures are the same on every machine (the back-off's jitter comes from a seeded source).
"""

from __future__ import annotations

import pytest

from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.simulation.idle_queues import IdleCost, idle_cost

MAX_IDLE_S = ScalingPolicy().max_idle_s


@pytest.fixture(scope="module")
def polling() -> dict[int, IdleCost]:
    return {k: idle_cost(k, seconds=1800.0) for k in (1, 2, 4)}


def test_the_highest_queue_keeps_a_single_queues_worst_case_pickup(
    polling: dict[int, IdleCost],
) -> None:
    """Whatever K, the first queue is looked at once per idle back-off step (1.5 s)."""
    single = polling[1].per_queue[0].worst_pickup_s
    assert single <= MAX_IDLE_S + 0.01
    for k in (2, 4):
        assert polling[k].per_queue[0].worst_pickup_s <= single + 0.01


def test_lower_queues_are_looked_at_in_turn_while_idle(polling: dict[int, IdleCost]) -> None:
    """Each of K - 1 lower queues waits at most K - 1 back-off steps for a look."""
    for k in (2, 4):
        for lower in polling[k].per_queue[1:]:
            assert lower.worst_pickup_s <= (k - 1) * MAX_IDLE_S + 0.01
    assert polling[4].per_queue[1].worst_pickup_s > MAX_IDLE_S  # less often than the first


def test_an_idle_hour_costs_at_most_twice_one_queues_whatever_k(
    polling: dict[int, IdleCost],
) -> None:
    """K = 2 and K = 4 cost two gets per back-off step, not K."""
    single = polling[1].transactions_per_hour
    assert single == pytest.approx(3600 / MAX_IDLE_S, rel=0.01)
    for k in (2, 4):
        assert polling[k].transactions_per_hour <= 2 * single + 2
        assert set(polling[k].calls) == {"get_messages"}


def test_with_push_triggers_idle_costs_only_the_watchdogs_counts() -> None:
    """Zero threads when idle: no get at all, one count per queue per watchdog check."""
    for k in (1, 4):
        pushed = idle_cost(k, seconds=3600.0, push=True)
        assert pushed.calls == {"approximate_message_count": 12 * k}
        assert {queue.worst_pickup_s for queue in pushed.per_queue} == {300.0}
