"""Replaying a recorded workload on a real queue, beside the simulator's prediction for it.

``cloudqueue replay`` proves a tuning: it puts a profile's arrivals on a real queue (Azurite, Azure
or the embedded store), sped up, while a real worker with the chosen settings drains it in this
process, and it simulates the same stretch with the same settings. Everything runs at
``speedup`` times real speed: the arrivals and the handling times are divided by it, the
settings (back-off, scaling) are used as they are. The producer notes when each put returned
and the handler when each message's handling started, on one clock, so pickup (the message on
the queue -> its handler starts) is measured to the millisecond, which the storage's own
insertion time (whole seconds on Azure) could not do.

The prediction is told what the real run met, so that only the policies' behaviour is compared:

* the arrivals when their puts returned: one producer thread cannot put a recorded burst at 60x
  (each put takes milliseconds), so a burst of 60 reaches the queue over half a second or more,
  and the worker met that, not the recording's instant;
* the handling times the handlers took (as a recording worker measures them);
* the storage service: the mean delete's latency, and how many calls a second it answered at
  its busiest, the producer's puts included (they take their turn at it as the consumer's calls
  do: ``cloudqueue.listener.simulation.storage_line``).

The transactions compared are the consumer's billed calls on the queue (gets, deletes, depth
checks, visibility updates): the producer's puts cost the same under any settings and are left
out, as in ``simulate``.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from cloudqueue.listener.producer.announce import WorkAnnouncer
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.push.triggers import account_of
from cloudqueue.listener.simulation.report import Latency, ServiceModel
from cloudqueue.listener.simulation.workload import Workload
from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.host.host import WorkerHost
from cloudqueue.workers.replay.replay_prediction import (
    CONSUMER_OPERATIONS,
    ReplayReport,
    predict,
    service_met,
)
from cloudqueue.workers.settings import CloudQueueSettings
from cloudqueue.workers.settings.connections import open_trigger_channel

R = TypeVar("R")

DRAIN_TIMEOUT_S = 120.0
CAPACITY_WINDOW_S = 0.25
CAPACITY_MIN_CALLS = 50
LINE_OPERATIONS = ("get_messages", "delete_message", "put_message")
"""The calls the simulator puts in line at a limited storage service."""


class _TimedStorage(ForwardingStorage):
    """Times the calls the prediction needs to know of the storage service.

    The simulator has one latency for every call: the mean delete's. Pickup is decided while
    work flows, when storage is busiest, and deletes happen only then (idle gets, most of the
    calls, would understate it). And a service answers so many calls a second: the most gets,
    deletes and puts that ended within any ``CAPACITY_WINDOW_S`` is how many it answered when
    a burst kept it busy (Azurite, sharing two cores with this process, a few hundred a second;
    Azure 2,000 messages a second on one queue).
    """

    def __init__(self, inner: QueueStorage) -> None:
        super().__init__(inner)
        self.delete_latencies_s: list[float] = []
        self.ended_s: list[float] = []

    def _call(self, queue_name: str, operation: str, call: Callable[[], R]) -> R:
        if operation not in LINE_OPERATIONS:
            return call()
        started = time.perf_counter()
        try:
            return call()
        finally:
            ended = time.perf_counter()
            self.ended_s.append(ended)
            if operation == "delete_message":
                self.delete_latencies_s.append(ended - started)

    def calls_per_s(self) -> float | None:
        """The busiest stretch's rate of calls (None with too few to tell)."""
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
    """What the replay worker's handler saw: when each message's first delivery started, and
    how long each handling took."""

    started_s: dict[int, float] = field(default_factory=dict)
    handling_s: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    all_handled: threading.Event = field(default_factory=threading.Event)
    expected: int = 0

    def picked(self, number: int, at_s: float) -> None:
        with self.lock:
            if number in self.started_s:
                return
            self.started_s[number] = at_s
            if len(self.started_s) >= self.expected:
                self.all_handled.set()

    def handled(self, duration_s: float) -> None:
        with self.lock:
            self.handling_s.append(duration_s)

    def latencies_s(self, put_s: list[float]) -> list[float]:
        """Pickup: from the moment a message's put returned until its handler started. A
        consumer may take a message before its put's answer reaches the producer: at once, 0."""
        return [max(0.0, at_s - put_s[number]) for number, at_s in self.started_s.items()]


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
    timed = _TimedStorage(storage)
    storage.create_queue(queue_name)
    host = WorkerHost([_replay_worker(queue_name, pickups)], settings, storage=timed)
    started = time.monotonic()
    host.start()
    try:
        publisher = Publisher(timed, queue_name, dict, announcer=_announcer(settings))
        put_s = _produce(publisher, fast, fast_service, seed, started)
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
    # The same stretch on both sides: the arrivals as they were put, until the run ended.
    arrivals_s = [at_s - started for at_s in put_s]
    stretch = Workload(tuple(sorted(arrivals_s)), max(fast.duration_s, wall_s), days=1.0)
    met = service_met(
        fast_service, pickups.handling_s, timed.delete_latencies_s, timed.calls_per_s()
    )
    transactions, pickup = predict(stretch, met, settings, seed)
    return ReplayReport(
        measured_transactions=dict(sorted(measured.items())),
        predicted_transactions=transactions,
        measured_pickup=Latency.of(pickups.latencies_s(put_s)),
        predicted_pickup=pickup,
        messages=len(fast.arrivals_s),
        handled=len(pickups.started_s),
        request_latency_s=met.request_latency_s,
        storage_calls_per_s=met.storage_calls_per_s,
        producer_late_s=max(
            (put - planned for put, planned in zip(arrivals_s, fast.arrivals_s, strict=True)),
            default=0.0,
        ),
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
        """Notes when each item's handling starts, then takes the handling time it names."""

        queue_name = queue

        def handle(self, item: dict[str, float]) -> None:
            started = time.monotonic()  # the producer runs in this process: one clock
            pickups.picked(int(item["n"]), started)
            time.sleep(item["handle_s"])
            pickups.handled(time.monotonic() - started)

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
    publisher: Publisher[dict[str, float]],
    workload: Workload,
    service: ServiceModel,
    seed: int,
    started: float,
) -> list[float]:
    """Put each arrival at its time (or as soon after as the puts before it allow): when each
    put returned, in ``time.monotonic()`` seconds, in the order of the workload's arrivals."""
    rng = random.Random(seed)
    pending = Counter(workload.arrivals_s)
    put_s: list[float] = []
    for at_s in sorted(pending):
        _until(started + at_s)
        for _ in range(pending[at_s]):
            publisher.publish({"n": len(put_s), "handle_s": service.draw_s(rng)})
            put_s.append(time.monotonic())
    return put_s
