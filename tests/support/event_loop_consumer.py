"""The event-loop consumer run from a test's thread: on a ``LoopThread`` of its own, so the test
polls with ``eventually`` as it does a threaded listener, and stops it the same way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from cloudqueue.listener.consumer.async_consumer import AsyncConsumer
from cloudqueue.listener.consumer.coroutines import LoopThread
from cloudqueue.listener.stores.async_storage import async_storage_for
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import Codec

T = TypeVar("T")


@contextmanager
def running_async_consumer(
    storage: QueueStorage,
    queue_name: str,
    handler: Callable[[T], Awaitable[None]],
    codec: Codec[T],
    **options: Any,
) -> Iterator[AsyncConsumer[T]]:
    """An ``AsyncConsumer`` on the async side of ``storage`` (the aio SDK for Azure), running
    until the block ends; then stopped, drained, its connections closed on its own loop."""
    loop = LoopThread("test:async-consumer")
    aio = async_storage_for(storage)
    consumer = AsyncConsumer(aio, queue_name, handler, codec, **options)
    running = loop.submit(consumer.run())
    try:
        yield consumer
    finally:
        loop.run(_stop(consumer))
        running.result(60)
        loop.run(aio.aclose())
        loop.close()


async def _stop(consumer: AsyncConsumer[Any]) -> None:
    consumer.stop()
    await asyncio.sleep(0)
