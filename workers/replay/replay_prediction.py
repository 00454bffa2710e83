"""What ``cloudqueue replay`` compares: the real run's figures beside the simulator's.

``predict`` simulates the replayed stretch with the replaying worker's settings and what the
run met (``service_met``: its handling times and storage service), several times over, since
one real run is one draw of the back-off's and the handlers' randomness.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cloudqueue.listener.simulation.compare import simulate
from cloudqueue.listener.simulation.policies import PolicySpec
from cloudqueue.listener.simulation.report import Latency, ServiceModel
from cloudqueue.listener.simulation.workload import Workload
from cloudqueue.workers.settings import CloudQueueSettings

CONSUMER_OPERATIONS = (
    "get_messages",
    "delete_message",
    "approximate_message_count",
    "update_visibility",
)
"""The billed calls a consumer makes per message or poll: what settings change."""


@dataclass
class ReplayReport:
    """What the real run measured, and what the simulator predicted for the same stretch."""

    measured_transactions: dict[str, int]
    predicted_transactions: dict[str, int]
    measured_pickup: Latency
    predicted_pickup: Latency
    messages: int
    handled: int
    request_latency_s: float
    storage_calls_per_s: float | None
    producer_late_s: float
    """The most a put returned after its time in the sped-up recording (the producer, one put
    after another, falls behind a burst)."""
    wall_s: float

    @property
    def measured_total(self) -> int:
        return sum(self.measured_transactions.get(op, 0) for op in CONSUMER_OPERATIONS)

    @property
    def predicted_total(self) -> int:
        return sum(self.predicted_transactions.get(op, 0) for op in CONSUMER_OPERATIONS)

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "handled": self.handled,
            "wall_s": self.wall_s,
            "request_latency_s": self.request_latency_s,
            "storage_calls_per_s": self.storage_calls_per_s,
            "producer_late_s": self.producer_late_s,
            "measured_transactions": self.measured_transactions,
            "predicted_transactions": self.predicted_transactions,
            "measured_total": self.measured_total,
            "predicted_total": self.predicted_total,
            "measured_pickup_p50_s": self.measured_pickup.p50_s,
            "measured_pickup_p95_s": self.measured_pickup.p95_s,
            "measured_pickup_max_s": self.measured_pickup.max_s,
            "predicted_pickup_p50_s": self.predicted_pickup.p50_s,
            "predicted_pickup_p95_s": self.predicted_pickup.p95_s,
            "predicted_pickup_max_s": self.predicted_pickup.max_s,
        }


def service_met(
    fast_service: ServiceModel,
    handling_s: Sequence[float],
    delete_latencies_s: Sequence[float],
    storage_calls_per_s: float | None,
) -> ServiceModel:
    """The handling and storage times a run met, for its prediction (failures are not
    replayed); the sped-up recording's handling times if no handler ran."""
    # The mean, not the median: a thread's calls follow one another, so the slow ones a busy
    # service answers late (a few times the median, here and there) add up in what it drains.
    latency_s = statistics.fmean(delete_latencies_s) if delete_latencies_s else 0.0
    if not handling_s:
        return replace(
            fast_service,
            failure_rate=0.0,
            request_latency_s=latency_s,
            storage_calls_per_s=storage_calls_per_s,
        )
    return ServiceModel(
        service_s=statistics.fmean(handling_s),
        distribution="empirical",
        observed_s=tuple(handling_s),
        request_latency_s=latency_s,
        storage_calls_per_s=storage_calls_per_s,
    )


PREDICTION_SEEDS = 10
"""One real run is one draw of the back-off's and the handlers' randomness: the prediction is
the median over this many seeded simulations of the same stretch."""


def predict(
    workload: Workload, service: ServiceModel, settings: CloudQueueSettings, seed: int
) -> tuple[dict[str, int], Latency]:
    """The median transactions (per operation) and pickup figures over ``PREDICTION_SEEDS``."""
    spec = PolicySpec(
        "replayed settings",
        threads=settings.listener.threads,
        batch_size=settings.listener.dequeue_batch_size,
        scaling=settings.scaling_policy(),
        push=settings.triggers.url is not None,
        watchdog_interval_s=settings.triggers.watchdog_interval_s,
        visibility_timeout_s=settings.listener.visibility_timeout_s,
    )
    results = [
        result
        for draw in range(PREDICTION_SEEDS)
        for result in simulate(workload, [spec], service=service, seed=seed + draw)
    ]
    operations = sorted({op for result in results for op in result.transactions})
    transactions = {
        op: round(statistics.median(r.transactions.get(op, 0) for r in results))
        for op in operations
    }

    def middle(figure: Callable[[Latency], float | None]) -> float | None:
        values = [value for r in results if (value := figure(r.latency)) is not None]
        return statistics.median(values) if values else None

    pickup = Latency(
        p50_s=middle(lambda latency: latency.p50_s),
        p90_s=middle(lambda latency: latency.p90_s),
        p99_s=middle(lambda latency: latency.p99_s),
        p95_s=middle(lambda latency: latency.p95_s),
        max_s=middle(lambda latency: latency.max_s),
    )
    return transactions, pickup
