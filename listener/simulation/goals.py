"""What ``tune``'s settings must meet, and, when none meets it, the one line that says why.

Pickup is from a message's put until its handler starts (p95 and max); drain is from its put
until it is handled and deleted, for every message: how long a burst takes to drain.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudqueue.listener.simulation.candidates import Trial
from cloudqueue.listener.simulation.report import PolicyResult


@dataclass(frozen=True, slots=True)
class Goals:
    """What the tuned settings must meet; None: no goal on that figure."""

    pickup_p95_s: float | None = None
    pickup_max_s: float | None = None
    drain_after_burst_s: float | None = None
    """The longest any message may take from its put until it is handled and deleted."""

    def misses(self, result: PolicyResult) -> list[str]:
        """The goals this result misses, as short phrases (empty: it meets them all)."""
        return [
            f"{name} {seconds_text(value)} > {seconds_text(goal)}"
            for name, value, goal in self.figures(result)
            if goal is not None and (value is None or value > goal)
        ]

    def figures(self, result: PolicyResult) -> list[tuple[str, float | None, float | None]]:
        """(name, the result's value, the goal) for each figure a goal may be set on."""
        return [
            ("pickup p95", result.latency.p95_s, self.pickup_p95_s),
            ("pickup max", result.latency.max_s, self.pickup_max_s),
            ("drain after a burst", result.longest_to_done_s, self.drain_after_burst_s),
        ]

    def pickup_met(self, result: PolicyResult) -> bool:
        return not [m for m in self.misses(result) if m.startswith("pickup")]


def binding(goals: Goals, trials: list[Trial]) -> str:
    """One line: the goal that binds, the closest value reached for it, and where.

    A goal no trial meets binds whatever the others say. When each goal is met by some trial
    but none meets them all, the binding one is the goal missed by the trials meeting all the
    others, least missed first: relaxing it to the value named gives settings that meet all.
    """
    goal_set = [
        (index, name, goal)
        for index, (name, _, goal) in enumerate(goals.figures(trials[0].result))
        if goal is not None
    ]
    for index, name, goal in goal_set:
        closest = _closest(goals, trials, index)
        if closest is None:
            return f"{name} <= {seconds_text(goal)} cannot be measured: no message was handled"
        if closest[0] > goal:
            return (
                f"{name} <= {seconds_text(goal)} cannot be met: the closest reachable is "
                f"{seconds_text(closest[0])} ({closest[1].candidate.name})"
            )
    together = [
        (closest[0] / goal, name, goal, closest)
        for index, name, goal in goal_set
        if (closest := _closest(goals, _meeting_all_but(goals, trials, index), index))
    ]
    if not together:
        return "the goals cannot be met together, though each can alone: relax one of them"
    _, name, goal, (value, trial) = min(together, key=lambda entry: entry[0])
    return (
        f"{name} <= {seconds_text(goal)} cannot be met with the other goals: the closest "
        f"reachable with them is {seconds_text(value)} ({trial.candidate.name})"
    )


def _closest(goals: Goals, trials: list[Trial], index: int) -> tuple[float, Trial] | None:
    """The lowest value of figure ``index`` among ``trials`` (None: none has one)."""
    reached = [
        (value, trial)
        for trial in trials
        if (value := goals.figures(trial.result)[index][1]) is not None
    ]
    return min(reached, key=lambda pair: pair[0], default=None)


def _meeting_all_but(goals: Goals, trials: list[Trial], index: int) -> list[Trial]:
    def meets(figure: tuple[str, float | None, float | None]) -> bool:
        _, value, goal = figure
        return goal is None or (value is not None and value <= goal)

    return [
        trial
        for trial in trials
        if all(meets(f) for k, f in enumerate(goals.figures(trial.result)) if k != index)
    ]


def seconds_text(seconds: float | None) -> str:
    """A duration as the goals' messages print it: ms below a second."""
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
