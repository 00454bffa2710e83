"""What ``listener.event_loop = "single"`` asks of a worker, checked before anything starts.

On the single loop (``cloudqueue.workers.host.loop_worker``) one event loop fetches, handles and
settles a worker's messages, so its handler must be an ``async def handle`` or ``async def
handle_batch`` (``async_batches``). The middleware seam is on that loop
(``cloudqueue.listener.consumer.event_loop.stack``), so rate and per-key limits, idempotency,
cancelling, groups, retry, tracing, kept results (``keep_results``), chains (``then``) and the
worker's own middleware act there as on threads; ``create_queues = false`` leaves the queues
uncreated as there, the metrics port's metrics and probes read its consumer (``observed_loop``), a
worker on several queues reads them in ``listener.priority`` order (``async_prioritized``) and a
partitioned queue by its partitions (``async_partitioned``). What the single loop has no place for
yet is refused here, naming it, rather than run without it: ``on_start``, whose argument is the
threaded listener the single loop does not build.
"""

from __future__ import annotations

import inspect
from typing import Any

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.settings import CloudQueueSettings

SWITCH_BACK = 'set listener.event_loop = "threads"'


def check_event_loop(kind: type[QueueWorker[Any]], settings: CloudQueueSettings) -> None:
    """ConfigurationError (exit code 2) when the worker's settings put it on the single loop
    and it cannot run there; nothing for ``event_loop = "threads"``."""
    if settings.listener.event_loop != "single":
        return
    name = kind.__qualname__
    which = "handle_batch" if kind.batches() else "handle"
    if not inspect.iscoroutinefunction(getattr(kind, which)):
        raise ConfigurationError(
            f'{name!r}: listener.event_loop = "single" runs an async def handle or handle_batch '
            f"only, and this worker has a plain def {which}: make it async def {which}, or "
            f"{SWITCH_BACK}"
        )
    gaps = single_loop_gaps(kind, settings)
    if gaps:
        raise ConfigurationError(
            f'{name!r}: listener.event_loop = "single" does not run {", ".join(gaps)} yet: '
            f"{SWITCH_BACK} for this worker"
        )


def single_loop_gaps(kind: type[QueueWorker[Any]], settings: CloudQueueSettings) -> list[str]:
    """The worker's controls and settings the single loop has no place for yet: ``on_start``,
    whose argument is the threaded listener. (``settings`` for what a later gap may ask.)"""
    asked = {"on_start (use startup)": kind.on_start is not QueueWorker.on_start}
    return [what for what, wanted in asked.items() if wanted]


__all__ = ["check_event_loop", "single_loop_gaps"]
