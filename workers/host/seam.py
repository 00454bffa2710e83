"""The middleware a hosted worker's messages pass through, in order, whichever loop runs them.

The threaded listener (``hosted_worker``) and the single event loop (``loop_worker``) take the
same list, built here once, so a control set in the settings or on the worker acts the same on
either path. Order matters, outermost first:

1. group completion: it must see every other middleware's decision about a member;
2. the per-key limit, then idempotent handling and cancelling (``key_controls``);
3. keeping results: stored before a member or a key settles;
4. metrics, the ``--record`` recorder, the rate limit;
5. the worker's controls (retry, time limits), its own middleware, the settings' middleware;
6. innermost, the chain step: it sends what the handler returned before anything settles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cloudqueue.listener.consumer.middleware import Middleware
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.middleware.rate_limit import RateLimit
from cloudqueue.listener.simulation.profile import ProfileRecorder
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.workflows.chains import ChainStep
from cloudqueue.listener.workflows.completion import GroupCompletion, group_completion_for
from cloudqueue.listener.workflows.keep_results import KeepResults
from cloudqueue.listener.workflows.result_stores import required_result_store
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.host.controls import Controls
from cloudqueue.workers.host.key_controls import key_middleware
from cloudqueue.workers.host.process_observability import ProcessObservability
from cloudqueue.workers.host.rate_limits import open_rate_limiter
from cloudqueue.workers.host.recording import Recording
from cloudqueue.workers.settings import CloudQueueSettings


@dataclass(frozen=True)
class HostParts:
    """What the host shares among its workers' middleware (each None when not configured)."""

    observability: ProcessObservability | None = None
    recorder: ProfileRecorder | None = None
    key_ledger: KeyLedger | None = None


def worker_middleware(
    worker: QueueWorker[Any],
    settings: CloudQueueSettings,
    storage: QueueStorage,
    location: CloudQueueLocation,
    controls: Controls,
    *,
    parts: HostParts,
    results: KeepResults | None = None,
    chain: ChainStep | None = None,
) -> list[Middleware]:
    """The worker's middleware in the order the module docstring gives."""
    observability = parts.observability
    count = None if observability is None else observability.count_decisions(location.queue_name)
    passed_on = None if chain is None else chain.passed_on
    made = group_completion_for(storage, controls.delivery, passed_on=passed_on)
    made += key_middleware(worker, settings, location, parts.key_ledger, count)
    made += [] if results is None else [results]
    if observability is not None:
        made.append(observability.middleware(location.queue_names, settings.scaling_policy()))
    if parts.recorder is not None:
        made.append(Recording(parts.recorder))
    limiter = open_rate_limiter(settings, location)
    if limiter is not None:
        made.append(RateLimit(limiter))
    made += [*controls.middleware, *worker.own_middleware(), *settings.listener.build_middleware()]
    made += [] if chain is None else [chain]
    return made


def keep_results_for(worker: QueueWorker[Any], storage: QueueStorage) -> KeepResults | None:
    """The middleware keeping the worker's results, when it keeps them (ConfigurationError
    when no result store goes with ``storage``)."""
    kind = type(worker)
    if not kind.keep_results:
        return None
    return KeepResults(required_result_store(storage), ttl_s=kind.results_ttl_s)


def returning_to(
    handler: Callable[[Any], Any], results: KeepResults | None, chain: ChainStep | None
) -> Callable[[Any], Any]:
    """``handler`` (plain or ``async def``), its values set aside for the middleware that keep
    them or send them on."""
    handler = handler if results is None else results.capturing(handler)
    return handler if chain is None else chain.returning(handler)


def completion_in(middleware: list[Middleware]) -> GroupCompletion | None:
    """The group completion among ``middleware``: the host points its announcements at itself."""
    return next((m for m in middleware if isinstance(m, GroupCompletion)), None)


__all__ = [
    "HostParts",
    "completion_in",
    "keep_results_for",
    "returning_to",
    "worker_middleware",
]
