"""How a simulated delivery ends once its handler returns, as ``MessageProcessor`` ends it.

A success deletes the message; a failure (``ServiceModel.failure_rate``) follows the real
delivery policy: ``retry_visibility_s`` hides the message for the retry back-off, and on its
last delivery (``exhausted``) it is poisoned (a put to the poison queue and a delete).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cloudqueue.listener.policies.backoff import RandomSource
from cloudqueue.listener.policies.delivery import DeliveryPolicy, exhausted, retry_visibility_s
from cloudqueue.listener.simulation.queue import SimulatedMessage, SimulatedQueue
from cloudqueue.listener.simulation.report import Sample


@dataclass(slots=True)
class Tally:
    """What a simulation counts as it runs (``report.RunStats``)."""

    latencies_s: list[float] = field(default_factory=list)
    longest_to_done_s: float | None = None
    thread_seconds: float = 0.0
    peak_threads: int = 0
    handled: int = 0
    failed: int = 0
    poisoned: int = 0
    samples: list[Sample] = field(default_factory=list)


def settle(
    queue: SimulatedQueue,
    message: SimulatedMessage,
    receipt: int,
    *,
    failed: bool,
    now_s: float,
    policy: DeliveryPolicy,
    rng: RandomSource,
    tally: Tally,
) -> None:
    """Delete a handled message, or retry or poison a failed one; count what happened."""
    if failed:
        tally.failed += 1
        if exhausted(message.dequeue_count, policy):
            if queue.poison(message, receipt):
                tally.poisoned += 1
            return
        delay_s = retry_visibility_s(message.dequeue_count, policy, rng)
        queue.update_visibility(message, receipt, now_s, delay_s)
    elif queue.delete(message, receipt):
        tally.handled += 1
        to_done_s = now_s - message.enqueued_s
        if tally.longest_to_done_s is None or to_done_s > tally.longest_to_done_s:
            tally.longest_to_done_s = to_done_s
