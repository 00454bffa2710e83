"""A point of ``tune``'s search: the settings that decide cost and latency, and its result.

A ``Candidate`` is what one worker is set to (idle back-off, scaling, push) and how many such
workers run; ``spec`` turns it into the policy the simulator runs (a fleet of W workers as one
pool with W times the floor and the ceiling of one), ``toml`` into the block for
``config/cloudqueue.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudqueue.listener.policies.scaling_rules import proportional
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.simulation.cost import monthly_cost_usd
from cloudqueue.listener.simulation.policies import PolicySpec
from cloudqueue.listener.simulation.report import PolicyResult

DEFAULT_MAX_THREADS = ScalingPolicy().max_threads
DEFAULT_MESSAGES_PER_THREAD = 32


@dataclass(frozen=True, slots=True)
class Candidate:
    """One point of the search: the settings that matter for cost and latency."""

    push: bool
    delta_backoff_s: float
    max_idle_s: float
    max_threads: int = DEFAULT_MAX_THREADS
    messages_per_thread: int = DEFAULT_MESSAGES_PER_THREAD
    workers: int = 1

    @property
    def min_threads(self) -> int:
        return 0 if self.push else 1

    def spec(self) -> PolicySpec:
        """The policy a fleet of ``workers`` such workers runs, as one simulated pool."""
        scaling = ScalingPolicy(
            min_threads=self.min_threads * self.workers,
            max_threads=self.max_threads * self.workers,
            rule=proportional(self.messages_per_thread),
            delta_backoff_s=self.delta_backoff_s,
            max_idle_s=self.max_idle_s,
        )
        return PolicySpec(
            self.name,
            threads=max(1, self.min_threads) * self.workers,
            scaling=scaling,
            push=self.push,
        )

    @property
    def name(self) -> str:
        mode = "push" if self.push else "poll"
        fleet = f", {self.workers} workers" if self.workers > 1 else ""
        return (
            f"{mode} idle {self.max_idle_s:g}s delta {self.delta_backoff_s:g}s "
            f"threads {self.max_threads} per {self.messages_per_thread}{fleet}"
        )

    def toml(self) -> str:
        """The settings as a block for ``config/cloudqueue.toml``."""
        lines = [
            "[listener]",
            "# one message per thread: what the search simulated (more in flight drains faster)",
            "concurrency = 1",
            "",
            "[backoff]",
            f"delta_backoff_s = {self.delta_backoff_s:g}",
            f"max_idle_s = {self.max_idle_s:g}",
            "",
            "[scaling]",
            f"min_threads = {self.min_threads}",
            f"max_threads = {self.max_threads}",
            'rule = "proportional"',
            f"messages_per_thread = {self.messages_per_thread}",
        ]
        if self.push:
            lines += [
                "",
                "[triggers]",
                "# push: producers announce work on Redis; set the URL of yours",
                'url = "redis://localhost:6379/0"',
            ]
        if self.workers > 1:
            lines.insert(0, f"# run {self.workers} workers (processes or pods) with these settings")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Trial:
    """A candidate and what the simulator measured of it."""

    candidate: Candidate
    result: PolicyResult

    @property
    def cost_per_month_usd(self) -> float:
        return monthly_cost_usd(self.result.transactions_per_day)
