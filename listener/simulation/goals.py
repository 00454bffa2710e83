"""What ``tune``'s settings must meet, and, when none meets it, the one line that says why.

Pickup is from a message's put until its handler starts (p95 and max); drain is from its put
until it is handled and deleted, for every message: how long a burst takes to drain.
"""

from __future__ import annotations

from dataclasses import dataclass

from listener.simulation.candidates import Trial
from listener.simulation.report import PolicyResult


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
    """One line: the first goal no trial meets, with the closest value reached and where."""
    for index, (name, _, goal) in enumerate(goals.figures(trials[0].result)):
        if goal is None:
            continue
        reached = [
            (value, trial)
            for trial in trials
            if (value := goals.figures(trial.result)[index][1]) is not None
        ]
        if not reached:
            return f"{name} <= {seconds_text(goal)} cannot be measured: no message was handled"
        value, trial = min(reached, key=lambda pair: pair[0])
        if value > goal:
            return (
                f"{name} <= {seconds_text(goal)} cannot be met: the closest reachable is "
                f"{seconds_text(value)} ({trial.candidate.name})"
            )
    return "the goals cannot be met together; relax one of them (each can be met alone)"


def seconds_text(seconds: float | None) -> str:
    """A duration as the goals' messages print it: ms below a second."""
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
