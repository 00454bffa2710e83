"""A worker's key middleware, as its settings describe them: the per-key limit (in this process,
or across the fleet through Redis) and idempotent handling with cancelling, on the key ledger.

A worker whose items are ``GroupDone`` (a group's completion worker) handles them idempotently by
key even when its settings turn no ``[idempotency] window_s`` on, remembering each group for
``COMPLETION_WINDOW_S``: a completion's publisher killed between its put and marking it sent
leaves a copy published again (``cloudqueue.listener.workflows.completion``), under the group id
as its key, and this drops it. Where no key ledger can be opened (an Azure account without a
blob endpoint), the copy is handled, as any duplicate there."""

from __future__ import annotations

from typing import Any

from cloudqueue.listener.consumer.middleware import Middleware
from cloudqueue.listener.limits.key_gate import KeyGate, LocalKeyGate
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.middleware.decisions import Count
from cloudqueue.listener.middleware.keyed import KeyedHandling
from cloudqueue.listener.middleware.per_key import PerKeyLimit
from cloudqueue.listener.push.triggers import account_of
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.workflows.group_done import GroupDone
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.settings import CloudQueueSettings

COMPLETION_WINDOW_S = 7 * 24 * 3600.0
"""How long a completion worker without an idempotency window of its own remembers a group it
handled: a copy comes within a claim's lease, or at the next listener's start."""

HOLD_TIMEOUTS = 2
"""A handling mark lasts this many visibility timeouts if its holder dies."""


def wants_key_ledger(settings: CloudQueueSettings) -> bool:
    """Whether a worker with these settings reads the key ledger."""
    return bool(settings.idempotency.window_s) or settings.cancel.check


def completes_groups(worker: type[QueueWorker[Any]]) -> bool:
    """Whether the worker's items are groups' completions."""
    return getattr(worker, "item_type", None) is GroupDone


def idempotency_window_s(worker: type[QueueWorker[Any]], settings: CloudQueueSettings) -> float:
    """The worker's own window, else ``COMPLETION_WINDOW_S`` for a completion worker."""
    own = settings.idempotency.window_s
    return own or (COMPLETION_WINDOW_S if completes_groups(worker) else 0.0)


def key_middleware(
    worker: QueueWorker[Any],
    settings: CloudQueueSettings,
    location: CloudQueueLocation,
    ledger: KeyLedger | None,
    count: Count | None = None,
) -> list[Middleware]:
    """The per-key limit (outermost: a message waits for its key before the ledger is asked),
    then idempotent handling and cancelling; none when the settings turn them off."""
    made: list[Middleware] = []
    if settings.limits.per_key:
        made.append(
            PerKeyLimit(
                open_key_gate(settings, location),
                concurrency_key=worker.concurrency_key_function(),
                count=count,
            )
        )
    window_s = idempotency_window_s(type(worker), settings)
    if ledger is not None and (window_s or wants_key_ledger(settings)):
        hold_s = HOLD_TIMEOUTS * settings.listener.visibility_timeout_s
        made.append(KeyedHandling(ledger, window_s=window_s, hold_s=hold_s, count=count))
    return made


def open_key_gate(settings: CloudQueueSettings, location: CloudQueueLocation) -> KeyGate:
    """The gate of ``limits.per_key``: fleet-wide with ``limits.url``, else this process's."""
    limits = settings.limits
    url = limits.url_value()
    if url is None:
        return LocalKeyGate(limits.per_key)
    # Imported here: the Redis client (and what it imports) only for a fleet-wide gate.
    from cloudqueue.listener.limits.redis_key_gate import RedisKeyGate, key_set

    account = account_of(settings.connection_string_value())
    return RedisKeyGate(
        url,
        prefix=key_set(account, location.queue_name, ""),
        limit=limits.per_key,
        lease_s=limits.lease_s,
    )


__all__ = [
    "COMPLETION_WINDOW_S",
    "completes_groups",
    "idempotency_window_s",
    "key_middleware",
    "open_key_gate",
    "wants_key_ledger",
]
