"""The numbers a Kubernetes deployment takes from cloudqueue's settings.

KEDA scales pods on the queue's depth; cloudqueue scales dequeue threads inside each pod on the
same depth. They agree when KEDA's per-pod target (``queueLength``) is the deepest backlog one
pod's scaling rule sizes within its ``max_threads``: below it a second pod would only idle beside
threads the first can still add; above it the rule wants more threads than a pod has. With the
proportional rule that is ``max_threads x messages_per_thread``; for any rule (a custom one too)
it is found by asking the rule itself.

    python -m examples.deploy.sizing --config examples/deploy/k8s/cloudqueue.toml
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cloudqueue import CloudQueueSettings, ConfigurationError, load_settings
from cloudqueue.listener import ScalingInput
from cloudqueue.workers import ScalingSettings

SHUTDOWN_MARGIN_S = 10
"""Seconds past ``shutdown_grace_s`` before Kubernetes kills the pod: joining the threads and
closing the clients after the drain."""

MAX_DEPTH = 10_000_000
"""The deepest backlog asked about; a rule that never fills a pod below it cannot size KEDA."""

ACTIVATION_QUEUE_LENGTH = 0
"""KEDA wakes a pod from zero when the depth exceeds this. Anything above 0 would leave up to
that many messages waiting with no pod to handle them, so it stays 0."""


@dataclass(frozen=True, slots=True)
class DeploySizing:
    """KEDA's two lengths and the pod's termination grace, for one worker's settings."""

    queue_length: int
    activation_queue_length: int
    termination_grace_period_s: int


def sizing(settings: CloudQueueSettings) -> DeploySizing:
    """The deployment numbers that follow from ``settings`` (see the module docstring)."""
    return DeploySizing(
        queue_length=messages_per_pod(settings.scaling),
        activation_queue_length=ACTIVATION_QUEUE_LENGTH,
        termination_grace_period_s=math.ceil(settings.shutdown_grace_s) + SHUTDOWN_MARGIN_S,
    )


def messages_per_pod(scaling: ScalingSettings) -> int:
    """The deepest backlog one pod's rule still sizes within ``max_threads`` (at least 1): one
    more message and it would want threads the pod does not have. A rule that never asks for
    more (a ``steps`` table topping out at ``max_threads``) gives the depth where it reaches
    ``max_threads``. Asked as a new pod starts, before a rate is measured (``drain_time`` then
    uses ``assumed_rate_per_s``)."""
    rule = scaling.build_rule()

    def threads(depth: int) -> int:
        return rule(ScalingInput(depth=depth, active_threads=1, per_thread_rate_per_s=None))

    if threads(MAX_DEPTH) > scaling.max_threads:
        return max(1, _first_depth(lambda depth: threads(depth) > scaling.max_threads) - 1)
    if threads(MAX_DEPTH) == scaling.max_threads:
        return max(1, _first_depth(lambda depth: threads(depth) >= scaling.max_threads))
    raise ConfigurationError(
        f"scaling rule {scaling.rule!r} never asks for max_threads ({scaling.max_threads}) "
        f"below a depth of {MAX_DEPTH}: choose KEDA's queueLength by hand"
    )


def _first_depth(reached: Callable[[int], bool]) -> int:
    """The smallest depth for which ``reached`` holds, given it holds at ``MAX_DEPTH`` and, once
    true, stays true (rules grow with the depth)."""
    low, high = -1, MAX_DEPTH  # reached(high); the answer is in (low, high]
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if reached(middle) else (middle, high)
    return high


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="cloudqueue settings file (TOML)")
    arguments = parser.parse_args(argv)
    numbers = sizing(load_settings(arguments.config))
    print("# keda.yaml, the azure-queue trigger's metadata")
    print(f'queueLength: "{numbers.queue_length}"')
    print(f'activationQueueLength: "{numbers.activation_queue_length}"')
    print("# deployment.yaml, the pod spec")
    print(f"terminationGracePeriodSeconds: {numbers.termination_grace_period_s}")


if __name__ == "__main__":
    main()
