"""A worker process on the event-loop consumer, for the kill -9 and SIGTERM tests until the host
runs one (``python -m tests.support.async_consumer_process module:Worker``).

It reads the settings as ``cloudqueue run`` does (the environment's ``CLOUDQUEUE_*``), opens the
store they name, and runs the worker's ``async def handle`` on an ``AsyncConsumer`` with the
settings' scaling policy, concurrency, batch size and visibility timeout. SIGTERM stops it the
way the host stops: fetching ends, started handlers finish, the process exits 0.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import signal
import sys
from typing import Any

from cloudqueue.listener.consumer.async_consumer import AsyncConsumer
from cloudqueue.listener.stores.async_storage import async_storage_for
from cloudqueue.listener.wire.codec import reading_codec
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.logging import configure_logging
from cloudqueue.workers.settings import load_settings
from cloudqueue.workers.settings.connections import open_storage_from_settings


async def serve(worker: QueueWorker[Any]) -> None:
    async def handle(item: Any) -> None:
        handled = worker.handle(item)
        if not inspect.isawaitable(handled):
            raise TypeError(f"{type(worker).__name__}.handle is not async def")
        await handled

    settings = load_settings()
    storage = open_storage_from_settings(settings)
    aio = async_storage_for(storage)
    options = settings.listener
    consumer = AsyncConsumer(
        aio,
        worker.location(options.visibility_timeout_s).queue_name,
        handle,
        reading_codec(worker.item_type, options.encoding),
        scaling=settings.scaling_policy(),
        concurrency=options.concurrency,
        batch_size=options.dequeue_batch_size,
        visibility_timeout_s=options.visibility_timeout_s,
        max_error_delay_s=options.max_error_delay_s,
    )
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, consumer.stop)
    try:
        await consumer.run()
    finally:
        await aio.aclose()
        storage.close()


def main(argv: list[str]) -> int:
    module_name, _, class_name = argv[0].partition(":")
    worker_type = getattr(importlib.import_module(module_name), class_name)
    configure_logging(load_settings().logging)
    asyncio.run(serve(worker_type()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
