"""The parts one listener's dequeue threads share, and how they are put together."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.deferrals import Deferrals
from cloudqueue.listener.consumer.failure_logs import FailureLogs
from cloudqueue.listener.consumer.fetching import Fetcher
from cloudqueue.listener.consumer.handoff import HandOff
from cloudqueue.listener.consumer.in_flight import HandlerPool, slots_per_loop
from cloudqueue.listener.consumer.leases import Lease, LeaseKeeper
from cloudqueue.listener.consumer.load import LoadReader
from cloudqueue.listener.consumer.middleware import MessageContext, Middleware
from cloudqueue.listener.consumer.pool import DequeuePool
from cloudqueue.listener.consumer.pool_control import ListenerPoolControl
from cloudqueue.listener.consumer.processing import KeyFunction, MessageProcessor
from cloudqueue.listener.consumer.queue_tally import QueueTally
from cloudqueue.listener.consumer.queues import QueueCreator
from cloudqueue.listener.consumer.settlement import Settlement
from cloudqueue.listener.consumer.stack import MiddlewareStack
from cloudqueue.listener.consumer.stats import ListenerMeters
from cloudqueue.listener.consumer.subscribers import Subscribers
from cloudqueue.listener.consumer.time_limits import TimeLimits
from cloudqueue.listener.consumer.tracing import ConsumerTracing
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.policies.backoff import RandomSource
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import MAX_BATCH_SIZE, QueueStorage
from cloudqueue.listener.wire.codec import Codec
from cloudqueue.listener.wire.limits import DecodingLimits


@dataclass(frozen=True)
class LoopSettings:
    """How a listener's threads fetch and back off."""

    batch_size: int
    idle_wait_s: float
    """The wait between empty gets when no middleware decides it (``dequeue_interval_s``)."""
    max_error_delay_s: float
    concurrency: int
    time_limit_s: float = 0.0
    """Longest a message's handler calls may run (0: no limit; ``time_limits``)."""
    adaptive_slots: bool = True
    """Fewer slots for handlers that return at once (``in_flight.slots_per_loop``); a batch
    handler's listener keeps them all, since its messages wait for their batch to fill."""

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ConfigurationError(f"dequeue_batch_size must be 1..32, got {self.batch_size}")
        if self.idle_wait_s < 0 or self.max_error_delay_s < 0:
            raise ConfigurationError("dequeue_interval_s and max_error_delay_s must be >= 0")
        if self.concurrency < 1:
            raise ConfigurationError(f"concurrency must be >= 1, got {self.concurrency}")
        if not (math.isfinite(self.time_limit_s) and self.time_limit_s >= 0):
            raise ConfigurationError(f"time_limit_s must be >= 0, got {self.time_limit_s}")


@dataclass(frozen=True)
class Signals:
    """What ends a listener's waits: ``stopping`` (for good), ``nudge`` (poll now)."""

    stopping: threading.Event
    nudge: threading.Event


@dataclass(frozen=True)
class LoopParts:
    """The pieces of one listener that its dequeue threads share."""

    pool: DequeuePool
    handoff: HandOff
    deferrals: Deferrals
    fetcher: Fetcher
    leases: LeaseKeeper
    handlers: HandlerPool
    meters: ListenerMeters
    stack: MiddlewareStack
    processor: MessageProcessor[Any]
    settlement: Settlement
    queues: QueueCreator
    signals: Signals
    load: LoadReader
    control: ListenerPoolControl
    slots_per_thread: Callable[[], int]
    """Messages each thread keeps in flight now (``cloudqueue.listener.consumer.in_flight``)."""
    on_last_thread_stopped: Callable[[], None]
    tally: QueueTally | None = None
    """What each queue's messages became, for a listener on several queues."""
    time_limits: TimeLimits | None = None


@dataclass(frozen=True)
class Inputs:
    """What a listener is made of: its settings and collaborators, as the facade was given."""

    storage: QueueStorage
    location: CloudQueueLocation
    codec: Codec[Any]
    settings: LoopSettings
    delivery: DeliveryPolicy
    payload_store: PayloadStore | None
    create_queues: bool
    decoding: DecodingLimits
    clock: Clock
    rng: RandomSource
    middleware: Sequence[Middleware]
    loop: LoopThread | None
    key_of: KeyFunction[Any] | None = None


def assemble(
    inputs: Inputs,
    *,
    meters: ListenerMeters,
    subscribers: Subscribers[Any],
    start_threads: Callable[[int], None],
) -> LoopParts:
    """Build a listener's parts around its meters, its observers and its way to start threads.

    Every listener has the failure logs and tracing middleware first (and, on several queues,
    its ``QueueTally``), then its own."""
    queue, location = inputs.location.queue_name, inputs.location
    storage, clock, concurrency = inputs.storage, inputs.clock, inputs.settings.concurrency
    tally = QueueTally(location.queue_names, location.queue_of) if location.lower_queues else None
    stack = MiddlewareStack(
        [FailureLogs(), ConsumerTracing(), *([] if tally is None else [tally]), *inputs.middleware],
        queue_name=queue,
        loop=inputs.loop,
    )
    signals = Signals(threading.Event(), threading.Event())
    pool, handoff = DequeuePool(f"cloudqueue:{queue}"), HandOff()

    adaptive = inputs.settings.adaptive_slots

    def slots_per_thread() -> int:
        measured = meters.handler_time.seconds_per_message if adaptive else None
        return slots_per_loop(concurrency, measured)

    load = LoadReader(
        storage, queue, meters=meters, handoff=handoff, pool=pool, slots_per_thread=slots_per_thread
    )
    settlement = Settlement(
        storage=storage,
        queue_name=queue,
        counters=meters.counters,
        clock=clock,
        policy=inputs.delivery,
        rng=inputs.rng,
        payload_store=inputs.payload_store,
        create_poison_queue=inputs.create_queues,
    )
    queues = QueueCreator(storage, location.queue_names, create=inputs.create_queues)
    many_in_flight = concurrency > 1
    deferrals = Deferrals(handoff, nudge=signals.nudge, stopping=signals.stopping, clock=clock)
    leases = LeaseKeeper(
        storage,
        queue,
        inputs.location.visibility_timeout_s,
        clock=clock,
        renew=inputs.delivery.renew_visibility,
    )
    processor: MessageProcessor[Any] = MessageProcessor(
        queue_name=queue,
        codec=inputs.codec,
        subscribers=subscribers,
        settlement=settlement,
        stack=stack,
        clock=clock,
        max_dequeue_count=inputs.delivery.max_dequeue_count,
        payload_store=inputs.payload_store,
        limits=inputs.decoding,
        # Only a thread with several slots sizes them from the handlers' time.
        record_handler_time=meters.handler_time.record if many_in_flight else None,
        max_hop_s=inputs.delivery.max_hop_s,
        queue_of=location.queue_of if location.lower_queues else None,
        key_of=inputs.key_of,
        deferrals=deferrals,
    )
    processor.leases = leases
    time_limits = None
    if inputs.settings.time_limit_s > 0:

        def expire(lease: Lease, context: MessageContext[Any], error: str) -> None:
            # The message ends here, as it would on its own thread: settled, lease ended.
            processor.abandon(lease, context, error)
            leases.end(lease)
            meters.counters.add("in_flight", -1)

        time_limits = TimeLimits(
            inputs.settings.time_limit_s, queue_name=queue, clock=clock, expire=expire
        )
        processor.time_limits = time_limits
    return LoopParts(
        pool=pool,
        handoff=handoff,
        deferrals=deferrals,
        fetcher=Fetcher(
            storage,
            inputs.location,
            batch_size=inputs.settings.batch_size,
            pool=pool,
            throughput=meters.throughput,
            stack=stack,
            queues=queues,
        ),
        leases=leases,
        handlers=HandlerPool(f"cloudqueue:{queue}"),
        meters=meters,
        stack=stack,
        processor=processor,
        settlement=settlement,
        queues=queues,
        signals=signals,
        load=load,
        control=ListenerPoolControl(
            queue,
            pool=pool,
            stack=stack,
            measure_load=load.measure,
            start_threads=start_threads,
            stopping=signals.stopping,
            nudge=signals.nudge,
        ),
        slots_per_thread=slots_per_thread,
        on_last_thread_stopped=subscribers.complete,
        tally=tally,
        time_limits=time_limits,
    )


__all__ = ["Inputs", "LoopParts", "LoopSettings", "Signals", "assemble"]
