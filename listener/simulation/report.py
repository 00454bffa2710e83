"""What a simulation measures per policy: transactions, cost, pickup latency, threads.

The per-day figures divide by the days the workload stands for (see
``cloudqueue.listener.simulation.cost`` for the price arithmetic).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.policies.backoff import RandomSource
from cloudqueue.listener.simulation.cost import (
    DEFAULT_PRICE_PER_10K_USD,
    cost_usd,
    monthly_cost_usd,
)

if TYPE_CHECKING:
    from cloudqueue.listener.simulation.queue import SimulatedQueue
    from cloudqueue.listener.simulation.workload import Workload


@dataclass(frozen=True, slots=True)
class ServiceModel:
    """How long a handler takes, and how long each storage call takes to answer."""

    service_s: float = 0.05
    distribution: Literal["fixed", "exponential", "empirical"] = "fixed"
    request_latency_s: float = 0.02
    failure_rate: float = 0.0
    """Chance that one delivery fails (the handler raises): retried, then poisoned."""
    observed_s: tuple[float, ...] = ()
    """Handling times seen by a recording worker: ``empirical`` draws one of them at random."""
    storage_calls_per_s: float | None = None
    """The calls the storage service answers a second, one after another (None: as many as
    come, each after ``request_latency_s``). Azure serves 2,000 messages/s on one queue; an
    emulator on a shared machine serves a few hundred, and then a burst waits for storage."""

    def __post_init__(self) -> None:
        if self.service_s < 0 or self.request_latency_s < 0:
            raise ConfigurationError("service_s and request_latency_s must be >= 0")
        if not 0 <= self.failure_rate <= 1:
            raise ConfigurationError(f"failure_rate must be in [0, 1], got {self.failure_rate}")
        if self.storage_calls_per_s is not None and self.storage_calls_per_s <= 0:
            raise ConfigurationError("storage_calls_per_s must be positive")
        if self.distribution == "empirical" and not self.observed_s:
            raise ConfigurationError("an empirical service model needs observed handling times")

    def draw_s(self, rng: RandomSource) -> float:
        """One message's handling time."""
        if self.distribution == "empirical":
            count = len(self.observed_s)
            return self.observed_s[min(count - 1, int(rng.uniform(0.0, 1.0) * count))]
        if self.distribution == "fixed" or self.service_s == 0:
            return self.service_s
        # Inverse transform: -mean x ln(U), with U in (0, 1] so the log is finite.
        return -self.service_s * math.log(1.0 - rng.uniform(0.0, 1.0) * 0.999999999)


@dataclass(frozen=True, slots=True)
class Sample:
    """The state at one moment, for the chart."""

    time_s: float
    depth: int
    threads: int
    transactions: int


@dataclass(frozen=True, slots=True)
class Latency:
    """Pickup latency (put -> handling starts) percentiles, in seconds; None with no messages."""

    p50_s: float | None
    p90_s: float | None
    p99_s: float | None
    p95_s: float | None = None
    max_s: float | None = None

    @classmethod
    def of(cls, latencies_s: list[float]) -> Latency:
        ordered = sorted(latencies_s)

        def rank(percent: int) -> float | None:
            return nearest_rank(ordered, percent)

        return cls(rank(50), rank(90), rank(99), rank(95), ordered[-1] if ordered else None)


def nearest_rank(ordered: list[float], percent: float) -> float | None:
    """The nearest-rank percentile of sorted values (p90 of 15 values = the 14th smallest)."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


class RunStats(Protocol):
    """What the simulator measured while it ran."""

    latencies_s: list[float]
    longest_to_done_s: float | None
    thread_seconds: float
    peak_threads: int
    handled: int
    failed: int
    poisoned: int
    samples: list[Sample]


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """One policy's figures over one workload."""

    policy: str
    transactions: dict[str, int]
    days: float
    handled: int
    """Messages handled and deleted (poisoned ones not included)."""
    failed: int
    """Deliveries whose handler failed (each retried or poisoned)."""
    poisoned: int
    left_in_queue: int
    latency: Latency
    peak_threads: int
    thread_seconds: float
    samples: list[Sample] = field(default_factory=list)
    longest_to_done_s: float | None = None
    """The longest any handled message took from its put until it was deleted: how long a
    burst takes to drain (None when nothing was handled)."""

    @classmethod
    def of(
        cls,
        policy: str,
        workload: Workload,
        queue: SimulatedQueue,
        stats: RunStats,
        *,
        left_in_queue: int,
    ) -> PolicyResult:
        return cls(
            policy=policy,
            transactions=dict(sorted(Counter(queue.transactions).items())),
            days=workload.day_count,
            handled=stats.handled,
            failed=stats.failed,
            poisoned=stats.poisoned,
            left_in_queue=left_in_queue,
            latency=Latency.of(stats.latencies_s),
            peak_threads=stats.peak_threads,
            thread_seconds=stats.thread_seconds,
            samples=list(stats.samples),
            longest_to_done_s=stats.longest_to_done_s,
        )

    @property
    def total_transactions(self) -> int:
        return sum(self.transactions.values())

    @property
    def transactions_per_day(self) -> float:
        return self.total_transactions / self.days

    def cost_per_day_usd(self, price_per_10k_usd: float = DEFAULT_PRICE_PER_10K_USD) -> float:
        return cost_usd(self.transactions_per_day, price_per_10k_usd)

    def cost_per_month_usd(self, price_per_10k_usd: float = DEFAULT_PRICE_PER_10K_USD) -> float:
        return monthly_cost_usd(self.transactions_per_day, price_per_10k_usd)

    def to_json(self, price_per_10k_usd: float = DEFAULT_PRICE_PER_10K_USD) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "transactions": self.transactions,
            "total_transactions": self.total_transactions,
            "transactions_per_day": self.transactions_per_day,
            "cost_per_day_usd": self.cost_per_day_usd(price_per_10k_usd),
            "cost_per_month_usd": self.cost_per_month_usd(price_per_10k_usd),
            "handled": self.handled,
            "failed": self.failed,
            "poisoned": self.poisoned,
            "left_in_queue": self.left_in_queue,
            "latency_p50_s": self.latency.p50_s,
            "latency_p90_s": self.latency.p90_s,
            "latency_p99_s": self.latency.p99_s,
            "latency_p95_s": self.latency.p95_s,
            "latency_max_s": self.latency.max_s,
            "longest_to_done_s": self.longest_to_done_s,
            "peak_threads": self.peak_threads,
            "thread_seconds": self.thread_seconds,
        }
