"""``tune``: the cheapest settings meeting a latency goal, found with the real policies."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor

import pytest

from cloudqueue.listener.simulation import ServiceModel, constant, idle
from cloudqueue.listener.simulation.candidates import Candidate, Trial
from cloudqueue.listener.simulation.goals import Goals, binding
from cloudqueue.listener.simulation.report import Latency, PolicyResult
from cloudqueue.listener.simulation.tuning import tune

SEED_LIKE_DAY = constant(1.0, 20 * 60).then(idle(22 * 3600))
"""The design document's day, shortened to keep the suite quick: a message a second for 20
minutes (the document has two hours), then 22 idle hours. bench_tune runs the whole day."""
SHORT_DAY = constant(1.0, 600).then(idle(3600))


@pytest.fixture(scope="module")
def executor() -> Iterator[Executor]:
    """Trials in threads: the same results as processes (each trial is seeded), less start-up."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool


def test_the_seeds_day_costs_less_than_the_defaults_and_a_tenth_of_a_fixed_pool(
    executor: Executor,
) -> None:
    """With p95 pickup <= 2 s the tuned settings beat today's defaults and a fixed pool of 8
    threads polling every second by at least 10x, and they meet the goal they were tuned for."""
    tuning = tune(SEED_LIKE_DAY, ServiceModel(), Goals(pickup_p95_s=2.0), executor=executor)
    assert tuning.best is not None
    best = tuning.best.result
    assert best.latency.p95_s is not None
    assert best.latency.p95_s <= 2.0
    peers = {result.policy: result.cost_per_month_usd() for result in tuning.baselines}
    assert tuning.best.cost_per_month_usd < peers["cloudqueue defaults"]
    assert tuning.best.cost_per_month_usd * 10 <= peers["fixed pool of 8 threads, every 1 s"]


def test_a_tighter_goal_never_costs_less(executor: Executor) -> None:
    """Cheapest for p95 <= 0.5 s costs at least what the cheapest for p95 <= 5 s costs."""
    loose = tune(SHORT_DAY, ServiceModel(), Goals(pickup_p95_s=5.0), executor=executor)
    tight = tune(SHORT_DAY, ServiceModel(), Goals(pickup_p95_s=0.5), executor=executor)
    assert loose.best is not None
    assert tight.best is not None
    assert tight.best.cost_per_month_usd >= loose.best.cost_per_month_usd
    assert tight.best.result.latency.p95_s is not None
    assert tight.best.result.latency.p95_s <= 0.5


def test_the_same_input_gives_the_same_answer(executor: Executor) -> None:
    """Seeded: a tuning is reproducible, whatever runs the trials."""
    goals = Goals(pickup_p95_s=2.0)
    first = tune(SHORT_DAY, ServiceModel(), goals, executor=executor, seed=7)
    with ThreadPoolExecutor(max_workers=1) as one:
        second = tune(SHORT_DAY, ServiceModel(), goals, executor=one, seed=7)
    assert first.best is not None
    assert second.best is not None
    assert first.best.candidate == second.best.candidate
    assert first.best.result.transactions == second.best.result.transactions


def test_an_infeasible_goal_names_the_goal_and_the_closest_reachable_value(
    executor: Executor,
) -> None:
    """No setting picks up within 1 ms when a storage call takes 20 ms: one line says so."""
    tuning = tune(SHORT_DAY, ServiceModel(), Goals(pickup_p95_s=0.001), executor=executor)
    assert tuning.best is None
    assert tuning.infeasible is not None
    assert tuning.infeasible.startswith("pickup p95 <= 1 ms cannot be met")
    assert "closest reachable is 20 ms" in tuning.infeasible


def test_without_push_only_polling_settings_are_chosen(executor: Executor) -> None:
    """--no-push: a team without Redis gets settings that need none."""
    tuning = tune(
        SHORT_DAY, ServiceModel(), Goals(pickup_p95_s=0.1), allow_push=False, executor=executor
    )
    assert all(not trial.candidate.push for trial in tuning.trials)


def test_a_drain_goal_sizes_the_pool(executor: Executor) -> None:
    """1,000 messages at once with 0.5 s handlers: draining within 60 s needs more threads than
    draining within 10 minutes, and each chosen pool meets its goal."""
    burst = constant(1000.0, 1.0).then(idle(1800))
    service = ServiceModel(service_s=0.5)
    fast = tune(
        burst,
        service,
        Goals(drain_after_burst_s=60.0),
        max_threads_per_worker=64,
        executor=executor,
    )
    slow = tune(burst, service, Goals(drain_after_burst_s=600.0), executor=executor)
    assert fast.best is not None
    assert slow.best is not None
    assert fast.best.result.longest_to_done_s is not None
    assert fast.best.result.longest_to_done_s <= 60.0
    assert fast.best.result.peak_threads > slow.best.result.peak_threads


def test_a_fleet_is_tried_when_one_worker_cannot_drain_in_time(executor: Executor) -> None:
    """With 4 threads per worker a 60 s drain of 1,000 half-second messages needs more workers."""
    burst = constant(1000.0, 1.0).then(idle(1800))
    tuning = tune(
        burst,
        ServiceModel(service_s=0.5),
        Goals(drain_after_burst_s=60.0),
        max_threads_per_worker=4,
        max_workers=8,
        executor=executor,
    )
    assert tuning.best is not None
    assert tuning.best.candidate.workers > 1
    assert tuning.best.candidate.max_threads <= 4


def test_the_chosen_settings_are_a_toml_block_cloudqueue_accepts() -> None:
    """The block parses and validates as settings (push needs its trigger URL)."""
    import tomllib

    from cloudqueue.workers.settings import CloudQueueSettings

    for push in (False, True):
        block = Candidate(push, 0.25, 10.0, max_threads=8, messages_per_thread=16).toml()
        settings = CloudQueueSettings(**tomllib.loads(block))
        assert settings.backoff.max_idle_s == 10.0
        assert settings.scaling.max_threads == 8
        assert settings.scaling.min_threads == (0 if push else 1)


def _trial(name_idle_s: float, *, p95_s: float, drain_s: float) -> Trial:
    result = PolicyResult(
        policy="x",
        transactions={},
        days=1.0,
        handled=1,
        failed=0,
        poisoned=0,
        left_in_queue=0,
        latency=Latency(p50_s=p95_s, p90_s=p95_s, p99_s=p95_s, p95_s=p95_s, max_s=p95_s),
        peak_threads=1,
        thread_seconds=1.0,
        longest_to_done_s=drain_s,
    )
    return Trial(Candidate(False, 0.1, name_idle_s), result)


def test_goals_met_alone_but_not_together_name_the_one_to_relax() -> None:
    """Each goal is met by some settings, none meets both: the line names the goal that needs
    the least relaxing (drain 60 -> 90 s rather than pickup 1 -> 3 s), with the value the
    settings meeting the other goal reach."""
    trials = [
        _trial(1.0, p95_s=0.5, drain_s=90.0),  # meets pickup only
        _trial(5.0, p95_s=3.0, drain_s=20.0),  # meets drain only
    ]
    line = binding(Goals(pickup_p95_s=1.0, drain_after_burst_s=60.0), trials)
    assert line.startswith("drain after a burst <= 60.00 s cannot be met with the other goals")
    assert "closest reachable with them is 90.00 s (poll idle 1s" in line
