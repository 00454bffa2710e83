"""The options every Azure SDK client here is built with: retries, timeouts, the HTTP transport.

The SDK defaults suit a script, not a worker: a 15 s first back-off, 20/60 s timeouts, 10 pooled
connections. ``client_options`` replaces them for every client (queues, payload blobs, the tick
ledger), sending requests through a pooled ``requests`` session. ``queue_client_options`` does the
same for the queue clients, which carry one or more requests per message, and there gives the
requests to urllib3 directly (``cloudqueue.listener.stores.urllib3_transport``) unless the
environment or the caller's options hold something only ``requests`` applies.
"""

from __future__ import annotations

import random
from typing import Any

from azure.storage.queue import ExponentialRetry

from cloudqueue.listener.stores.http_session import ca_bundle, pooled_session
from cloudqueue.listener.stores.urllib3_transport import transport_for_queues

__all__ = [
    "CONNECTION_POOL_SIZE",
    "CONNECTION_TIMEOUT_S",
    "READ_TIMEOUT_S",
    "FastRetry",
    "client_options",
    "queue_client_options",
]

CONNECTION_TIMEOUT_S = 5.0
"""Connecting takes milliseconds when storage is up; past a few seconds, retry or give up."""

READ_TIMEOUT_S = 20.0
"""Queue calls answer in milliseconds (there is no long polling), but Azurite can stall ~20 s in a
garbage-collection pass; shorter would turn those stalls into duplicate deliveries."""

CONNECTION_POOL_SIZE = 256
"""Connections kept per host. requests keeps 10 by default and discards (with a warning) every
connection beyond that, so a listener scaled past 10 threads would reconnect on every call; a
worker's calls run on its dequeue threads and up to max_threads x listener.concurrency handler
threads (16 + 16 x 8 by default), with room for a second worker in the process."""

TRANSPORT_OPTIONS = frozenset(
    {
        "transport",
        "session",
        "session_owner",
        "use_env_settings",
        "proxies",
        "connection_verify",
        "connection_cert",
        "connection_data_block_size",
    }
)
"""Caller options that configure ``requests``' transport: given any, the queue clients keep it."""


class FastRetry(ExponentialRetry):
    """Exponential back-off with jitter in fractions of a second, for blips only.

    The SDK default (``initial_backoff=15, increment_base=3``) parks a dequeue thread ~15 s on a
    single 503 or connection reset and ~45 s before it gives up. The listener already backs off
    with jitter between polls, so the SDK only needs to smooth over a blip: three quick retries
    (ceilings 0.25 s, 0.5 s, 1 s, each jittered to 50-100 % so threads do not retry in lockstep),
    at most ~1.75 s of sleeping in all; then the call fails with TransientStorageError and the
    listener's own back-off decides how long to wait.
    """

    def __init__(
        self,
        *,
        initial_backoff_s: float = 0.25,
        increment_base: float = 2.0,
        max_backoff_s: float = 2.0,
        retry_total: int = 3,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            initial_backoff=0, increment_base=0, retry_total=retry_total, random_jitter_range=0
        )
        self.initial_backoff_s = initial_backoff_s
        self.increment_base_f = increment_base
        self.max_backoff_s = max_backoff_s
        self._rng = rng or random.Random()

    def get_backoff_time(self, settings: dict[str, Any]) -> float:
        """Seconds to sleep before retry number ``settings["count"]`` (1 for the first)."""
        retry_number = max(1, int(settings["count"]))
        ceiling = self.initial_backoff_s * self.increment_base_f ** (retry_number - 1)
        ceiling = min(self.max_backoff_s, ceiling)
        return self._rng.uniform(ceiling / 2, ceiling)

    def __repr__(self) -> str:
        return (
            f"FastRetry(initial_backoff_s={self.initial_backoff_s}, "
            f"increment_base={self.increment_base_f}, max_backoff_s={self.max_backoff_s}, "
            f"retry_total={self.total_retries})"
        )


def _retries_and_timeouts() -> dict[str, Any]:
    return {
        "retry_policy": FastRetry(),
        "connection_timeout": CONNECTION_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
    }


def client_options(**overrides: Any) -> dict[str, Any]:
    """Keyword arguments for the SDK clients: fast retries, bounded timeouts, a bigger pool.

    ``overrides`` win; a caller bringing its own ``transport`` or ``session`` gets no pool of ours.
    """
    options = _retries_and_timeouts()
    if "transport" not in overrides and "session" not in overrides:
        options["session"] = pooled_session(CONNECTION_POOL_SIZE)
        bundle = ca_bundle()
        if bundle is not None:  # what requests would read per request, read once
            options["connection_verify"] = bundle
    return {**options, **overrides}


def queue_client_options(**overrides: Any) -> dict[str, Any]:
    """``client_options`` for the queue clients, with the urllib3 transport where it applies.

    It applies unless the environment has proxy or netrc settings, or ``overrides`` configure the
    transport (``TRANSPORT_OPTIONS``); then the queue clients get ``client_options`` unchanged.
    """
    if TRANSPORT_OPTIONS.isdisjoint(overrides):
        options = {**_retries_and_timeouts(), **overrides}
        transport = transport_for_queues(
            pool_size=CONNECTION_POOL_SIZE,
            connection_timeout_s=options["connection_timeout"],
            read_timeout_s=options["read_timeout"],
        )
        if transport is not None:
            return {**options, "transport": transport}
    return client_options(**overrides)
