"""What a worker's handler controls make of its listener: a retry policy, a time limit, batches.

``cloudqueue run`` (``cloudqueue.workers.host.hosted_worker``) and
``cloudqueue.workers.testing.run_until_drained`` build a worker's listener from the same
``Controls``, so a worker's ``retry``, ``listener.time_limit_s`` and ``handle_batch`` behave alike
in production and in its tests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.consumer.middleware import Middleware
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.middleware.retry import RetryPolicy
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.host.batch_handler import Batcher
from cloudqueue.workers.host.loop_checks import check_event_loop
from cloudqueue.workers.settings import CloudQueueSettings


@dataclass(frozen=True)
class Controls:
    """The listener arguments a worker's controls decide."""

    delivery: DeliveryPolicy
    concurrency: int
    time_limit_s: float
    adaptive_slots: bool = True
    middleware: list[Middleware] = field(default_factory=list)
    """``RetryPolicy`` when the worker's ``retry`` gives up on some exceptions."""


def controls_for(kind: type[QueueWorker[Any]], settings: CloudQueueSettings) -> Controls:
    """The controls of a worker class under its effective settings; ConfigurationError when
    they contradict each other (checked by ``cloudqueue run`` before anything starts)."""
    kind.check()
    check_event_loop(kind, settings)  # an event loop of its own: async def handle only
    options, retry = settings.listener, kind.retry
    delivery = settings.delivery_policy()
    middleware: list[Middleware] = []
    if retry is not None:
        delivery = retry.applied_to(delivery)
        if retry.classifies:
            middleware.append(RetryPolicy(retry))
    if not kind.batches():
        return Controls(delivery, options.concurrency, options.time_limit_s, True, middleware)
    batch = settings.batch
    if 0 < options.time_limit_s <= batch.max_wait_s:
        raise ConfigurationError(
            f"{kind.__qualname__}: batch.max_wait_s ({batch.max_wait_s:g}) must be less than "
            f"listener.time_limit_s ({options.time_limit_s:g}): a message waits for its batch "
            "within its time limit"
        )
    # Each message of a batch holds a slot until its batch is called: one thread must be able to
    # hold a whole batch, however fast the handler returns.
    concurrency = max(options.concurrency, batch.max_items)
    return Controls(delivery, concurrency, options.time_limit_s, False, middleware)


def subscribe_handler(
    listener: CloudQueueListener[Any],
    worker: QueueWorker[Any],
    settings: CloudQueueSettings,
    *,
    handler: Callable[[Any], None],
    batch_handler: Callable[[list[Any]], Awaitable[None] | None] | None = None,
    loop: LoopThread,
) -> Batcher[Any] | None:
    """Give the listener's messages to the worker: each item to ``handler`` (its ``handle``,
    run as ``AsyncHandlerRunner`` does), or, for a batch worker, batches to ``batch_handler``
    (its ``handle_batch`` by default); the ``Batcher`` then."""
    if not type(worker).batches():
        listener.subscribe(handler)
        return None
    batcher: Batcher[Any] = Batcher(
        batch_handler or worker.handle_batch,
        max_items=settings.batch.max_items,
        max_wait_s=settings.batch.max_wait_s,
        loop=loop,
        clock=listener.clock,
        sleeper=listener.sleeper,
    )
    listener.subscribe_batches(batcher)
    return batcher


__all__ = ["Controls", "controls_for", "subscribe_handler"]
