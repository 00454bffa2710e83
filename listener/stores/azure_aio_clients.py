"""The options the SDK's aio queue clients are built with: retries, timeouts, one shared pool.

The same choices as ``azure_clients`` for the threaded clients (the fast retry curve, bounded
timeouts, a pool as large), carried over to the aio pipeline, plus one the aio SDK needs and the
threaded one does not: idle connections are closed by the client *before* the server drops them.
Azure drops a connection idle for about 15 s and Azurite (Node's default) after 5 s; aiohttp keeps
one for 15 s, so a request sent on a connection the server has just closed fails with a reset
(azure-sdk-for-python#26332). A worker backing off for minutes between polls then opens a fresh
connection per poll: a handshake, not a transaction, so the idle cost per hour does not change.

The environment's proxy and netrc settings are read once, when the session opens, as the
threaded store's ``http_session`` reads them: with ``trust_env`` aiohttp scans the whole
environment and looks for a ``.netrc`` file on every request, each on a worker thread (for the
single loop's drain of ``bench_async_path``, against a stub server so that only the client
counts, about 0.5 ms of CPU per message: a quarter of the client's); with no such setting at
open the session skips that, and with one it keeps aiohttp's per-request look, so
``HTTPS_PROXY``/``NO_PROXY`` and ``.netrc`` work as before. Set them before the worker starts.

A Microsoft Entra ID credential is the threaded store's own (``ThreadedTokenCredential``): the
same sign-in, whatever the ``credential`` setting names, with no second set of azure-identity
classes to configure.
"""

from __future__ import annotations

import asyncio
from typing import Any

from azure.core.credentials import AccessToken

# The aio package exports no retry classes: the async ExponentialRetry lives in the SDK's _shared.
from azure.storage.queue._shared.policies_async import ExponentialRetry as AsyncExponentialRetry

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.azure_clients import (
    CONNECTION_POOL_SIZE,
    CONNECTION_TIMEOUT_S,
    READ_TIMEOUT_S,
    FastRetry,
)
from cloudqueue.listener.stores.http_session import requests_reads_environment

__all__ = [
    "IDLE_KEEPALIVE_S",
    "AsyncFastRetry",
    "ThreadedTokenCredential",
    "aio_client_options",
    "aio_session",
]

IDLE_KEEPALIVE_S = 4.0
"""Seconds an idle pooled connection is kept: below the 5 s after which Azurite (and many
proxies) close one, well below Azure's ~15 s."""


class AsyncFastRetry(AsyncExponentialRetry):
    """The listener's ``FastRetry`` curve on the aio pipeline, whose retry sleeps are awaited."""

    def __init__(self, curve: FastRetry | None = None) -> None:
        self._curve = curve or FastRetry()
        super().__init__(
            initial_backoff=0,
            increment_base=0,
            retry_total=self._curve.total_retries,
            random_jitter_range=0,
        )

    def get_backoff_time(self, settings: dict[str, Any]) -> float:
        return self._curve.get_backoff_time(settings)


def aio_client_options(**overrides: Any) -> dict[str, Any]:
    """The listener's retry curve and timeouts for an aio client; ``overrides`` win."""
    options: dict[str, Any] = {
        "retry_policy": AsyncFastRetry(),
        "connection_timeout": CONNECTION_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
    }
    return {**options, **overrides}


def aio_session(*, keepalive_s: float = IDLE_KEEPALIVE_S) -> Any:
    """A new ``aiohttp.ClientSession`` on the running loop: the one pool every queue client of a
    store shares (``CONNECTION_POOL_SIZE`` connections, idle ones closed after ``keepalive_s``)."""
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - the `aio` extra is missing
        raise ConfigurationError(
            "async handlers on Azure need aiohttp: pip install 'cloudqueue[aio]'"
        ) from None
    connector = aiohttp.TCPConnector(limit=CONNECTION_POOL_SIZE, keepalive_timeout=keepalive_s)
    # As the SDK builds its own session (no cookies, bodies as sent), and trust_env as the
    # threaded clients' requests session: read at open, the environment's proxies and netrc
    # apply to both paths alike, and a session with none looks for none on each request.
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        trust_env=requests_reads_environment(),
    )


class ThreadedTokenCredential:
    """A synchronous token credential (azure-identity's, or your own) signing for the aio
    pipeline. The pipeline keeps a token until shortly before it expires, so it asks about once
    an hour; that one call, which may go to Entra ID over the network, runs on a worker thread
    so that the loop goes on meanwhile. The credential stays its owner's (the threaded store's):
    ``close`` leaves it open."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        token: AccessToken = await asyncio.to_thread(self._inner.get_token, *scopes, **kwargs)
        return token

    async def close(self) -> None:
        """Nothing to release here: the synchronous credential belongs to whoever opened it."""

    async def __aenter__(self) -> ThreadedTokenCredential:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"ThreadedTokenCredential({self._inner!r})"
