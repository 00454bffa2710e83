"""Replaying a recorded workload on a real queue, beside the simulator's prediction for it.

``cloudqueue replay`` proves a tuning: it puts a profile's arrivals on a real queue (Azurite, Azure
or the embedded store), sped up, while a real worker with the chosen settings drains it in this
process, and it simulates the same sped-up stretch with the same settings. Everything runs at
``speedup`` times real speed on both sides: the arrivals and the handling times are divided by
it, the settings (back-off, scaling) are used as they are. Each message carries the time it was
sent and how long its handler should take, so pickup is measured to the millisecond, which the
storage's own insertion time (whole seconds on Azure) could not do.

The transactions compared are the consumer's billed calls on the queue (gets, deletes, depth
checks, visibility updates): the producer's puts cost the same under any settings and are left
out, as in ``simulate``.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from listener.producer.announce import WorkAnnouncer
from listener.producer.publisher import Publisher
from listener.push.triggers import account_of
from listener.simulation.compare import simulate
from listener.simulation.policies import PolicySpec
from listener.simulation.report import Latency, ServiceModel
from listener.simulation.workload import Workload
from listener.stores.forwarding import ForwardingStorage
from listener.stores.storage import QueueStorage
from workers.host import WorkerHost
from workers.hosted_worker import open_trigger_channel
from workers.settings import CloudQueueSettings
from workers.worker import QueueWorker

R = TypeVar("R")

CONSUMER_OPERATIONS = (
    "get_messages",
    "delete_message",
    "approximate_message_count",
    "update_message",
)
"""The billed calls a consumer makes per message or poll: what settings change."""
DRAIN_TIMEOUT_S = 120.0
CAPACITY_WINDOW_S = 0.25
CAPACITY_MIN_CALLS = 50


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


class _TimedStorage(ForwardingStorage):
    """Times the deletes: what the prediction is told of the storage service.

    The simulator has one latency for every call: the median delete's. Pickup is decided while
    work flows, when storage is busiest, and deletes happen only then (idle gets, most of the
    calls, would understate it). And a service answers so many calls a second: the most deletes
    that ended within any ``CAPACITY_WINDOW_S`` is how many it answered when a burst kept it
    busy (Azurite, alone on its core, about 300 a second; Azure 2,000 on one queue).
    """

    def __init__(self, inner: QueueStorage) -> None:
        super().__init__(inner)
        self.latencies_s: list[float] = []
        self.ended_s: list[float] = []

    def _call(self, queue_name: str, operation: str, call: Callable[[], R]) -> R:
        if operation != "delete_message":
            return call()
        started = time.perf_counter()
        try:
            return call()
        finally:
            ended = time.perf_counter()
            self.latencies_s.append(ended - started)
            self.ended_s.append(ended)

    def calls_per_s(self) -> float | None:
        """The busiest stretch's rate of deletes (None with too few to tell)."""
        ended = sorted(self.ended_s)
        if len(ended) < CAPACITY_MIN_CALLS:
            return None
        most, first = 0, 0
        for last, at in enumerate(ended):
            while at - ended[first] > CAPACITY_WINDOW_S:
                first += 1
            most = max(most, last - first + 1)
        return most / CAPACITY_WINDOW_S


@dataclass
class _Pickups:
    """Pickup latencies of first deliveries, gathered by the replay worker's handler."""

    latencies_s: list[float] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    all_handled: threading.Event = field(default_factory=threading.Event)
    expected: int = 0

    def picked(self, number: int, latency_s: float) -> None:
        with self.lock:
            if number in self.seen:
                return
            self.seen.add(number)
            self.latencies_s.append(latency_s)
            if len(self.seen) >= self.expected:
                self.all_handled.set()


def replay(
    workload: Workload,
    service: ServiceModel,
    settings: CloudQueueSettings,
    storage: QueueStorage,
    queue_name: str,
    *,
    speedup: float,
    seed: int = 1,
) -> ReplayReport:
    """Run ``workload`` sped up on ``queue_name`` with a real worker, and predict the same."""
    fast = _sped_up(workload, speedup)
    fast_service = _sped_up_service(service, speedup)
    pickups = _Pickups(expected=len(fast.arrivals_s))
    worker_type = _replay_worker(queue_name, pickups)
    timed = _TimedStorage(storage)
    storage.create_queue(queue_name)
    host = WorkerHost([worker_type], settings, storage=timed)
    started = time.monotonic()
    host.start()
    try:
        publisher = Publisher(storage, queue_name, dict, announcer=_announcer(settings))
        _produce(publisher, fast, fast_service, seed)
        # The recorded idle tail costs polls too: run it whole, and a settling tail after it in
        # which an idle poller surely wakes (on both sides, so the last ones are handled).
        _until(started + fast.duration_s + _settle_s(settings))
        pickups.all_handled.wait(DRAIN_TIMEOUT_S)
    finally:
        host.stop()
    wall_s = time.monotonic() - started
    measured = {
        operation: count
        for (queue, operation), count in host.storage.counts_by_queue_and_operation().items()
        if queue == queue_name and operation in CONSUMER_OPERATIONS
    }
    latency_s = statistics.median(timed.latencies_s) if timed.latencies_s else 0.0
    # The same stretch on both sides: the run lasted until the last message was handled.
    stretch = Workload(fast.arrivals_s, max(fast.duration_s, wall_s), days=1.0)
    measured_service = replace(
        fast_service, request_latency_s=latency_s, storage_calls_per_s=timed.calls_per_s()
    )
    transactions, pickup = _predict(stretch, measured_service, settings, seed)
    return ReplayReport(
        measured_transactions=dict(sorted(measured.items())),
        predicted_transactions=transactions,
        measured_pickup=Latency.of(pickups.latencies_s),
        predicted_pickup=pickup,
        messages=len(fast.arrivals_s),
        handled=len(pickups.seen),
        request_latency_s=latency_s,
        storage_calls_per_s=measured_service.storage_calls_per_s,
        wall_s=wall_s,
    )


def _settle_s(settings: CloudQueueSettings) -> float:
    """Time after the last arrival for the slowest idle poller to wake twice."""
    return 2 * settings.backoff.max_idle_s + 1.0


def _sped_up(workload: Workload, speedup: float) -> Workload:
    return Workload(
        tuple(t / speedup for t in workload.arrivals_s), workload.duration_s / speedup, days=1.0
    )


def _sped_up_service(service: ServiceModel, speedup: float) -> ServiceModel:
    return replace(
        service,
        service_s=service.service_s / speedup,
        observed_s=tuple(t / speedup for t in service.observed_s),
    )


def _replay_worker(queue: str, pickups: _Pickups) -> type[QueueWorker[Any]]:
    class ReplayWorker(QueueWorker[dict[str, float]]):
        """Measures each item's pickup, then takes the handling time the item names."""

        queue_name = queue

        def handle(self, item: dict[str, float]) -> None:
            pickups.picked(int(item["n"]), time.time() - item["sent_s"])
            time.sleep(item["handle_s"])

    return ReplayWorker


def _announcer(settings: CloudQueueSettings) -> WorkAnnouncer | None:
    """Push settings replay with the producer's announcements, as the simulator assumes."""
    channel = open_trigger_channel(settings)
    if channel is None:
        return None
    account = account_of(settings.connection_string_value())
    return WorkAnnouncer(channel, account=account, mode="per_batch")


def _until(deadline: float) -> None:
    """Wait until the monotonic ``deadline`` (an event wait: Ctrl-C still interrupts)."""
    threading.Event().wait(max(0.0, deadline - time.monotonic()))


def _produce(
    publisher: Publisher[dict[str, float]], workload: Workload, service: ServiceModel, seed: int
) -> None:
    """Put each arrival at its time (one put call per instant, as the simulator groups them)."""
    rng = random.Random(seed)
    start = time.monotonic()
    pending = Counter(workload.arrivals_s)
    number = 0
    for at_s in sorted(pending):
        _until(start + at_s)
        for _ in range(pending[at_s]):
            publisher.publish({"n": number, "sent_s": time.time(), "handle_s": service.draw_s(rng)})
            number += 1


PREDICTION_SEEDS = 5
"""One real run is one draw of the back-off's and the handlers' randomness: the prediction is
the median over this many seeded simulations of the same stretch."""


def _predict(
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
