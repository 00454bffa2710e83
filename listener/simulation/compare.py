"""Run several policies over one workload, each on its own simulated queue and random source."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import structlog

from listener.simulation.policies import PolicySpec
from listener.simulation.report import PolicyResult, ServiceModel
from listener.simulation.simulator import PolicySimulation
from listener.simulation.workload import Workload


def simulate(
    workload: Workload,
    policies: Sequence[PolicySpec],
    *,
    service: ServiceModel | None = None,
    seed: int = 1,
    samples: int = 500,
) -> list[PolicyResult]:
    """Each policy's figures over ``workload``, in the order given (same seed for each)."""
    with _quiet_scaler_logs():
        return [
            PolicySimulation(
                spec, workload, service or ServiceModel(), seed=seed, samples=samples
            ).run()
            for spec in policies
        ]


@contextmanager
def _quiet_scaler_logs() -> Iterator[None]:
    """A simulated day scales thousands of times: keep the scaler's info logs out of the way."""
    previous: dict[str, Any] = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    try:
        yield
    finally:
        structlog.configure(**previous)
