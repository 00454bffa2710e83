"""What ``listener.event_loop = "single"`` asks of a worker, checked before anything starts.

On the single loop (``cloudqueue.workers.host.loop_worker``) one event loop fetches, handles and
settles a worker's messages, so its handler must be an ``async def handle``. The controls that
live on the listener's middleware seam are not on that loop yet (the seam comes to it in issue
41): a worker asking for one is refused here, naming it, rather than run without it. So is
``on_start``, whose argument is the threaded listener the single loop does not build.

What is on by default cannot be refused without refusing every worker: group completion, the
cancel check of keyed messages and tracing. ``WITHOUT_SEAM`` names them, in the warning the host
logs when it builds such a worker.
"""

from __future__ import annotations

import inspect
from typing import Any

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.settings import CloudQueueSettings

SWITCH_BACK = 'set listener.event_loop = "threads"'
WITHOUT_SEAM = "group completion, cancel checks, tracing"
"""What a worker on the single loop runs without, whatever its settings, until the seam is there."""


def check_event_loop(kind: type[QueueWorker[Any]], settings: CloudQueueSettings) -> None:
    """ConfigurationError (exit code 2) when the worker's settings put it on the single loop
    and it cannot run there; nothing for ``event_loop = "threads"``."""
    if settings.listener.event_loop != "single":
        return
    name = kind.__qualname__
    if kind.batches() or not inspect.iscoroutinefunction(kind.handle):
        which = "handle_batch" if kind.batches() else "a plain def handle"
        raise ConfigurationError(
            f'{name!r}: listener.event_loop = "single" runs an async def handle only, and this '
            f"worker has {which}: make it async def handle, or {SWITCH_BACK}"
        )
    gaps = single_loop_gaps(kind, settings)
    if gaps:
        raise ConfigurationError(
            f'{name!r}: listener.event_loop = "single" does not run {", ".join(gaps)} yet: '
            f"{SWITCH_BACK} for this worker"
        )


def single_loop_gaps(kind: type[QueueWorker[Any]], settings: CloudQueueSettings) -> list[str]:
    """The worker's controls and settings the single loop has no place for yet."""
    options = settings.listener
    asked = {
        "a worker on several queues": len(kind.location(options.visibility_timeout_s).queue_names)
        > 1,
        "listener.partitions": options.partitions > 1 or options.drain_partitions is not None,
        "listener.middleware": bool(options.middleware),
        "listener.create_queues = false": not options.create_queues,
        "the worker's own middleware": bool(kind.middleware),
        "retry's exception classes": kind.retry is not None and kind.retry.classifies,
        "rate_limit": settings.rate_limit.max_messages_per_s is not None,
        "limits.per_key": settings.limits.per_key > 0,
        "idempotency.window_s": settings.idempotency.window_s > 0,
        "keep_results": kind.keep_results,
        "then": kind.then is not None,
        "on_start (use startup)": kind.on_start is not QueueWorker.on_start,
        "observability.metrics_port": settings.observability.metrics_port is not None,
        "observability.record_path": settings.observability.record_path is not None,
    }
    return [what for what, wanted in asked.items() if wanted]


__all__ = ["check_event_loop", "single_loop_gaps"]
