"""The event-loop consumer run from a test's thread: on a ``LoopThread`` of its own, so the test
polls with ``eventually`` as it does a threaded listener, and stops it the same way."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.consumer.middleware import Middleware
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.async_storage import async_storage_for
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import Codec, MessageCodec

T = TypeVar("T")

KINDS = ["threads", "event_loop"]
"""The threaded listener, and the event-loop consumer an ``async def`` handler gets: the ids of
a test parametrized over both."""


class Consuming(Protocol):
    """What a test reads of a running consumer of either kind."""

    @property
    def messages_processed(self) -> int: ...
    @property
    def messages_failed(self) -> int: ...
    @property
    def threads_alive(self) -> int: ...
    def stop(self, timeout_s: float = ...) -> bool: ...


class LoopConsumer(Generic[T]):
    """An ``AsyncConsumer`` on the async side of ``storage`` (the aio SDK for Azure), started and
    stopped from the test's thread as a threaded listener is, with the figures its tests read."""

    def __init__(
        self,
        storage: QueueStorage,
        queue_name: str,
        handler: Callable[[T], Awaitable[None]],
        codec: Codec[T],
        **options: Any,
    ) -> None:
        self._loop = LoopThread("test:async-consumer")
        self._aio = async_storage_for(storage)
        self.consumer = AsyncConsumer(self._aio, queue_name, handler, codec, **options)
        self._running: concurrent.futures.Future[None] | None = None

    def start(self) -> LoopConsumer[T]:
        self._running = self._loop.submit(self.consumer.run())
        return self

    def stop(self, timeout_s: float = 60) -> bool:
        """Stop, drain, close its connections on its own loop (again: nothing to do)."""
        running, self._running = self._running, None
        if running is None:
            return True
        try:
            self._loop.run(_stop(self.consumer))
            running.result(timeout_s)
        finally:
            self._loop.run(self._aio.aclose())
            self._loop.close()
        return True

    @property
    def messages_processed(self) -> int:
        return self.consumer.counters.processed

    @property
    def messages_failed(self) -> int:
        return self.consumer.counters.failed

    @property
    def messages_poisoned(self) -> int:
        return self.consumer.counters.poisoned

    @property
    def threads_alive(self) -> int:
        """Its dequeue tasks (a threaded listener's dequeue threads)."""
        return self.consumer.active_tasks


ONE_TASK = ScalingPolicy(max_threads=1, max_idle_s=0.05, delta_backoff_s=0.01)
"""The event-loop consumer's counterpart of one dequeue thread polling every 50 ms or less."""


def start_either(
    kind: str,
    storage: QueueStorage,
    queue_name: str,
    record: Callable[[Any], None],
    *,
    middleware: list[Middleware],
    delivery: DeliveryPolicy | None = None,
    concurrency: int = 1,
    handler_s: float = 0.0,
    **threaded_options: Any,
) -> Consuming:
    """A consumer of dict items calling ``record`` on each, then working ``handler_s``, with
    ``middleware`` and ``concurrency`` handlers at once: one dequeue thread (``threads``;
    ``threaded_options`` go to its listener), or the event-loop consumer of an async handler with
    one dequeue task. Stop it (``consumers`` fixtures do)."""
    if kind == "event_loop":

        async def handle(item: Any) -> None:
            record(item)
            await asyncio.sleep(handler_s)

        options: dict[str, Any] = {
            "scaling": ONE_TASK,
            "middleware": middleware,
            "concurrency": concurrency,
        }
        if delivery is not None:
            options["delivery"] = delivery
        return LoopConsumer(storage, queue_name, handle, MessageCodec(dict), **options).start()
    if delivery is not None:
        threaded_options["delivery"] = delivery
    listener: CloudQueueListener[Any] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name, visibility_timeout_s=30),
        dict,
        middleware=middleware,
        concurrency=concurrency,
        **threaded_options,
    )

    def work(item: Any) -> None:
        record(item)
        time.sleep(handler_s)  # the handler's own work, not a wait for a condition

    listener.subscribe(work if handler_s else record)
    listener.start_listener(1)
    return listener


@contextmanager
def running_async_consumer(
    storage: QueueStorage,
    queue_name: str,
    handler: Callable[[T], Awaitable[None]],
    codec: Codec[T],
    **options: Any,
) -> Iterator[AsyncConsumer[T]]:
    """An ``AsyncConsumer`` running until the block ends; then stopped, drained, its connections
    closed on its own loop."""
    running = LoopConsumer(storage, queue_name, handler, codec, **options).start()
    try:
        yield running.consumer
    finally:
        running.stop()


async def _stop(consumer: AsyncConsumer[Any]) -> None:
    consumer.stop()
    await asyncio.sleep(0)
