"""Run several policies over one workload, each on its own simulated queue and random source."""

from __future__ import annotations

from collections.abc import Sequence

from cloudqueue.listener.simulation.policies import PolicySpec
from cloudqueue.listener.simulation.report import PolicyResult, ServiceModel
from cloudqueue.listener.simulation.simulator import PolicySimulation
from cloudqueue.listener.simulation.workload import Workload


def simulate(
    workload: Workload,
    policies: Sequence[PolicySpec],
    *,
    service: ServiceModel | None = None,
    seed: int = 1,
    samples: int = 500,
) -> list[PolicyResult]:
    """Each policy's figures over ``workload``, in the order given (same seed for each)."""
    return [
        PolicySimulation(
            spec, workload, service or ServiceModel(), seed=seed, samples=samples
        ).run()
        for spec in policies
    ]
