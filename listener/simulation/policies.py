"""The contenders a simulation compares: how many threads, which idle policy, push or poll.

Each is described with the listener's own parts: a ``ScalingPolicy`` drives the real
``ElasticScaler``; without one, an idle thread asks a ``queue_empty`` function (Functions-like
back-off) or, like a listener with no handler, waits its fixed ``dequeue_interval_s``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cloudqueue.listener.consumer.events import QueueEmptyDecision
from cloudqueue.listener.policies.backoff import RandomSource, randomized_exponential_backoff
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.scaling.waker import DEFAULT_WATCHDOG_INTERVAL_S

IdlePolicy = Callable[[int, RandomSource], QueueEmptyDecision]
"""A queue_empty decision from the count of consecutive empty gets and a random source."""


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """One way of running the listener, to simulate side by side with others."""

    name: str
    threads: int = 1
    """Dequeue threads started at the beginning (as ``start_listener(threads)``)."""
    batch_size: int = 32
    scaling: ScalingPolicy | None = None
    """Run the real ElasticScaler with this policy; None: a fixed pool with no scaler."""
    queue_empty: IdlePolicy | None = None
    """Without a scaler: the idle decision; None waits ``dequeue_interval_s`` every time."""
    dequeue_interval_s: float = 1.0
    push: bool = False
    """Producers announce each put call with a trigger; a watchdog checks while at zero."""
    watchdog_interval_s: float = DEFAULT_WATCHDOG_INTERVAL_S
    visibility_timeout_s: float = 30.0
    delivery: DeliveryPolicy = field(default_factory=DeliveryPolicy)
    """Retry back-off and poison threshold for failed deliveries (the listener's default)."""


def naive_poller(threads: int = 1, interval_s: float = 1.0) -> PolicySpec:
    """The design's poller: ``threads`` threads, each polling every ``interval_s`` when idle."""
    return PolicySpec(
        f"naive {threads} thr @ {interval_s:g} s", threads=threads, dequeue_interval_s=interval_s
    )


def fixed_pool(threads: int) -> PolicySpec:
    """cloudqueue's idle back-off, but a pool that never grows or shrinks."""
    return PolicySpec(
        f"fixed pool {threads} thr",
        threads=threads,
        scaling=ScalingPolicy(min_threads=threads, max_threads=threads),
    )


DEFAULTS_NAME = "cloudqueue defaults"
PUSH_NAME = "cloudqueue + push"


def cloudqueue_defaults(scaling: ScalingPolicy | None = None) -> PolicySpec:
    """One poller that backs off to 1.5 s, scaling 1..16 threads by the default rule."""
    return PolicySpec(DEFAULTS_NAME, scaling=scaling or ScalingPolicy())


def cloudqueue_push(scaling: ScalingPolicy | None = None) -> PolicySpec:
    """Scale to zero between bursts: push triggers wake the pool, a watchdog checks every 5 min."""
    return PolicySpec(PUSH_NAME, scaling=scaling or ScalingPolicy(min_threads=0), push=True)


FUNCTIONS_MIN_POLL_S = 0.1
FUNCTIONS_MAX_POLL_S = 60.0


def functions_backoff(idle_count: int, rng: RandomSource) -> QueueEmptyDecision:
    """Azure Functions' queue trigger: randomized exponential polling from 100 ms up to 1 min."""
    delay_s = randomized_exponential_backoff(
        idle_count,
        delta_s=FUNCTIONS_MIN_POLL_S,
        min_s=FUNCTIONS_MIN_POLL_S,
        max_s=FUNCTIONS_MAX_POLL_S,
        rng=rng,
    )
    return QueueEmptyDecision(stop=False, delay_s=delay_s)


def functions_like() -> PolicySpec:
    """One poller taking batches of 16, backing off 100 ms -> 60 s like the Functions trigger."""
    return PolicySpec("functions-like", threads=1, batch_size=16, queue_empty=functions_backoff)


def standard_contenders(naive_threads: int = 1, naive_interval_s: float = 1.0) -> list[PolicySpec]:
    """The five policies the command compares by default."""
    return [
        naive_poller(naive_threads, naive_interval_s),
        fixed_pool(4),
        cloudqueue_defaults(),
        cloudqueue_push(),
        functions_like(),
    ]
