"""The cheapest settings for a workload and a latency goal, found by simulating the real policies.

``tune`` answers the question ``simulate`` leaves to the user: given what the traffic looks like
and the pickup and drain times it must meet, which settings cost least? It searches a documented
grid in two stages, each a set of independent binary searches run side by side:

1. **Idle and pickup.** For poll mode (one poller at the floor) and push mode (zero, woken by
   triggers), and each ``delta_backoff_s`` in ``DELTAS_S``, find the longest ``max_idle_s`` in
   ``MAX_IDLE_GRID_S`` whose pickup still meets the goals. Idle polling is what an idle queue
   costs, and the longest back-off that keeps pickup within the goal is the cheapest. A binary
   search at ``REFERENCE_DELTA_S`` first; each other delta then walks the grid from the point
   found (a delta moves the answer a point or two, and a walk of one or two trials costs less
   than a search of four).
2. **Scaling and drain.** From the cheapest of those, and for each ``messages_per_thread`` of
   the proportional rule in ``MESSAGES_PER_THREAD``, find the fewest ``max_threads`` (up to the
   per-worker limit) that drain a burst within the goal. Where none meets every goal, the same
   from the next cheapest (``STAGE_TWO_STARTS`` in all), then with more workers (up to
   ``max_workers``), each adding its own pollers.

Pickup gets worse and cost falls as ``max_idle_s`` grows, and drain gets faster as threads are
added: the binary searches rely on that. Every run is seeded, so a tuning is reproducible.
A fleet of W workers is simulated as one pool with W times the floor and the ceiling of one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import partial

from cloudqueue.listener.simulation.candidates import DEFAULT_MAX_THREADS, Candidate, Trial
from cloudqueue.listener.simulation.compare import simulate
from cloudqueue.listener.simulation.goals import Goals, binding
from cloudqueue.listener.simulation.policies import (
    cloudqueue_defaults,
    functions_like,
    naive_poller,
)
from cloudqueue.listener.simulation.report import PolicyResult, ServiceModel
from cloudqueue.listener.simulation.workload import Workload

DELTAS_S = (0.05, 0.1, 0.25, 0.5)
REFERENCE_DELTA_S = 0.1
"""The delta stage 1 binary-searches max_idle_s with (the defaults'); the others walk from there."""
MAX_IDLE_GRID_S = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0)
MESSAGES_PER_THREAD = (8, 32, 128)
THREAD_GRID = (1, 2, 4, 8, 16, 32, 64, 128)
STAGE_TWO_STARTS = 2
"""Stage 1's cheapest candidates that stage 2 sizes the pool for."""


@dataclass(frozen=True, slots=True)
class Tuning:
    """The outcome: the cheapest trial that meets the goals (or why none does), and context."""

    goals: Goals
    best: Trial | None
    trials: list[Trial]
    baselines: list[PolicyResult]
    infeasible: str | None
    """One line naming the goal that binds and the closest reachable value (None if met)."""

    def curve(self) -> list[Trial]:
        """Cost against p95 pickup: the trials no other trial beats on both."""
        ranked = sorted(
            (t for t in self.trials if t.result.latency.p95_s is not None),
            key=lambda t: (t.cost_per_month_usd, t.result.latency.p95_s),
        )
        front: list[Trial] = []
        for trial in ranked:
            p95 = trial.result.latency.p95_s
            if not front or (p95 is not None and p95 < (front[-1].result.latency.p95_s or 0)):
                front.append(trial)
        return front


@dataclass(frozen=True, slots=True)
class _Problem:
    """What every trial of one tuning shares (sent to the worker processes once per task)."""

    workload: Workload
    service: ServiceModel
    goals: Goals
    seed: int

    def evaluate(self, candidate: Candidate) -> Trial:
        [result] = simulate(self.workload, [candidate.spec()], service=self.service, seed=self.seed)
        return Trial(candidate, result)


def tune(
    workload: Workload,
    service: ServiceModel,
    goals: Goals,
    *,
    max_threads_per_worker: int = DEFAULT_MAX_THREADS,
    max_workers: int = 1,
    allow_push: bool = True,
    seed: int = 1,
    executor: Executor | None = None,
) -> Tuning:
    """Search the grid (module docstring) for the cheapest settings meeting ``goals``.

    Trials run in ``executor`` (default: a process per core); results do not depend on it.
    """
    problem = _Problem(workload, service, goals, seed)
    own = executor is None
    pool = executor or ProcessPoolExecutor(max_workers=min(4, os.cpu_count() or 1))
    try:
        baselines = pool.submit(_baselines, problem)
        trials = _idle_stage(
            pool, problem, min(DEFAULT_MAX_THREADS, max_threads_per_worker), allow_push=allow_push
        )
        # Where no idle setting meets the pickup goal, a burst's backlog is what delays pickup:
        # stage 2 sizes the pool from the cheapest ones all the same.
        picked = sorted(
            (chain[-1] for chain in trials if chain),
            key=lambda trial: (not goals.pickup_met(trial.result), *_rank(trial)),
        )[:STAGE_TWO_STARTS]
        sized = _scaling_stage(pool, problem, picked, max_threads_per_worker, max_workers)
        # A stage-2 chain may hold its stage-1 start again: each trial counts once.
        tried = list({id(trial): trial for chain in [*trials, *sized] for trial in chain}.values())
        peers = baselines.result()
    finally:
        if own:
            pool.shutdown()
    feasible = [t for t in tried if not goals.misses(t.result)]
    best = min(feasible, key=_rank, default=None)
    return Tuning(goals, best, tried, peers, None if best else binding(goals, tried))


PEERS = (
    ("cloudqueue defaults", cloudqueue_defaults),
    ("Functions queue trigger, defaults", functions_like),
    ("1 poller, every 1 s", lambda: naive_poller(1, 1.0)),
    ("fixed pool of 8 threads, every 1 s", lambda: naive_poller(8, 1.0)),
)
"""What the tuned settings are compared with: today's defaults and the peers' defaults."""


def _baselines(problem: _Problem) -> list[PolicyResult]:
    specs = [replace(build(), name=label) for label, build in PEERS]
    return simulate(problem.workload, specs, service=problem.service, seed=problem.seed)


def _rank(trial: Trial) -> tuple[float, float]:
    return (trial.cost_per_month_usd, trial.result.latency.p95_s or 0.0)


def _idle_stage(
    pool: Executor, problem: _Problem, max_threads: int, *, allow_push: bool
) -> list[list[Trial]]:
    """Stage 1: per mode, a binary search over max_idle_s at ``REFERENCE_DELTA_S``; then, for
    each other delta, a walk along the grid from the idle found."""
    starts = [
        Candidate(push, REFERENCE_DELTA_S, MAX_IDLE_GRID_S[0], max_threads=max_threads)
        for push in ((False, True) if allow_push else (False,))
    ]
    chains = list(pool.map(partial(_idle_chain, problem), starts))
    walks = [
        (chain[-1].candidate, delta)
        for chain in chains
        for delta in DELTAS_S
        if delta != REFERENCE_DELTA_S
    ]
    return chains + list(pool.map(partial(_delta_walk, problem), walks))


def _scaling_stage(
    pool: Executor,
    problem: _Problem,
    picked: list[Trial],
    max_threads_per_worker: int,
    max_workers: int,
) -> list[list[Trial]]:
    """Stage 2: one binary search over max_threads per rule, from the cheapest start first;
    the next start, then more workers, only while none meets the goals."""
    chains: list[list[Trial]] = []
    for workers in range(1, max_workers + 1):
        for trial in picked:
            starts = [
                (replace(trial.candidate, messages_per_thread=per_thread, workers=workers), trial)
                for per_thread in MESSAGES_PER_THREAD
            ]
            grown = list(pool.map(partial(_thread_chain, problem, max_threads_per_worker), starts))
            chains += grown
            if any(not problem.goals.misses(t.result) for chain in grown for t in chain):
                return chains
    return chains


def _idle_chain(problem: _Problem, start: Candidate) -> list[Trial]:
    """Binary search for the longest max_idle_s meeting the pickup goals; the trials run, the
    one chosen last (the first grid point if none meets them)."""

    def trial_at(index: int) -> Trial:
        idle_s = MAX_IDLE_GRID_S[index]
        delta_s = min(start.delta_backoff_s, idle_s)
        return problem.evaluate(replace(start, max_idle_s=idle_s, delta_backoff_s=delta_s))

    good = partial(_pickup_met, problem.goals)
    return _bisect(len(MAX_IDLE_GRID_S), trial_at, good, longest=True)


def _delta_walk(problem: _Problem, start: tuple[Candidate, float]) -> list[Trial]:
    """The longest max_idle_s meeting the pickup goals with another delta, one grid point at a
    time from where the reference delta's search ended: longer while it meets them, shorter
    until it does (the first grid point if none does). The trials run, the one chosen last."""
    found, delta = start
    index = MAX_IDLE_GRID_S.index(found.max_idle_s)

    def trial_at(at: int) -> Trial:
        idle_s = MAX_IDLE_GRID_S[at]
        return problem.evaluate(
            replace(found, max_idle_s=idle_s, delta_backoff_s=min(delta, idle_s))
        )

    chosen = trial_at(index)
    tried = [chosen]
    step = 1 if _pickup_met(problem.goals, chosen) else -1
    while 0 <= index + step < len(MAX_IDLE_GRID_S):
        index += step
        trial = trial_at(index)
        tried.append(trial)
        met = _pickup_met(problem.goals, trial)
        if step == 1 and not met:
            break
        chosen = trial
        if step == -1 and met:
            break
    return [trial for trial in tried if trial is not chosen] + [chosen]


def _thread_chain(problem: _Problem, limit: int, start: tuple[Candidate, Trial]) -> list[Trial]:
    """Binary search for the fewest max_threads (up to ``limit``) meeting every goal; the
    stage-1 trial it starts from is not run again."""
    candidate, known = start
    grid = [threads for threads in THREAD_GRID if threads <= limit] or [limit]

    def trial_at(index: int) -> Trial:
        trying = replace(candidate, max_threads=grid[index])
        return known if trying == known.candidate else problem.evaluate(trying)

    good = partial(_meets_all, problem.goals)
    return _bisect(len(grid), trial_at, good, longest=False)


def _pickup_met(goals: Goals, trial: Trial) -> bool:
    return goals.pickup_met(trial.result)


def _meets_all(goals: Goals, trial: Trial) -> bool:
    return not goals.misses(trial.result)


def _bisect(
    size: int, trial_at: Callable[[int], Trial], good: Callable[[Trial], bool], *, longest: bool
) -> list[Trial]:
    """Trials of a monotone binary search over ``size`` grid points; the chosen trial last.

    ``longest``: good points form a prefix and the last good one is wanted (max_idle_s); else
    they form a suffix and the first good one is wanted (max_threads).
    """
    low, high = 0, size - 1
    tried: dict[int, Trial] = {}
    chosen: int | None = None
    while low <= high:
        middle = (low + high) // 2
        trial = tried[middle] = trial_at(middle)
        if good(trial):
            chosen = middle
            low, high = (middle + 1, high) if longest else (low, middle - 1)
        else:
            low, high = (low, middle - 1) if longest else (middle + 1, high)
    if chosen is None:
        chosen = 0 if longest else size - 1
        if chosen not in tried:
            tried[chosen] = trial_at(chosen)
    last = tried.pop(chosen)
    return [*tried.values(), last]
