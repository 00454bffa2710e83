"""Azure Storage Queues behind ``AsyncQueueStorage``, on the SDK's aio clients.

The message operations of ``AzureQueueStorage`` with the same checks, the same error translation
and the same envelopes, awaited on one event loop. Every queue client of a store shares one
``aiohttp`` session (``azure_aio_clients.aio_session``): one connection pool per store, however
many queues (a worker's, its poison queue, a re-publish target) it talks to.

A session belongs to the loop it was opened on (azure-sdk-for-python#33810, #32309: a session
used from another loop fails in ways that name neither loop). So the store opens nothing when
built: its first call opens the session on the loop making it, a call from any other loop is
refused with a plain RuntimeError, and ``aclose`` closes it on that loop, after which the store
may be opened again on a new one (a worker host restarting its loop).
"""

from __future__ import annotations

import asyncio
from typing import Any

from azure.core.exceptions import ResourceExistsError
from azure.core.pipeline.transport import AioHttpTransport
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from cloudqueue.listener import errors
from cloudqueue.listener.stores._embedded import (
    check_get_arguments,
    check_put_arguments,
    check_update_arguments,
)
from cloudqueue.listener.stores.azure_aio_clients import (
    IDLE_KEEPALIVE_S,
    ThreadedTokenCredential,
    aio_client_options,
)
from cloudqueue.listener.stores.azure_aio_clients import aio_session as new_session
from cloudqueue.listener.stores.azure_errors import error_code, translated
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage, _to_message
from cloudqueue.listener.stores.storage import QueueMessage, validate_queue_name

__all__ = ["AioAzureQueueStorage"]

TRANSPORT_OPTIONS = ("connection_verify", "connection_cert")
"""Client options that are the transport's: ``connection_verify`` (False, or a CA bundle's
path) and ``connection_cert``."""


class AioAzureQueueStorage:
    """The queues of one Azure Storage account (or Azurite), on one event loop's connections."""

    def __init__(
        self,
        account_url: str,
        credential: Any = None,
        *,
        keepalive_s: float = IDLE_KEEPALIVE_S,
        **overrides: Any,
    ) -> None:
        """``account_url`` may carry a SAS; ``credential`` is a key (or its signing policy), a SAS
        credential or an *async* token credential; ``overrides`` replace our client options."""
        self._account_url = account_url
        self._credential = credential
        self._keepalive_s = keepalive_s
        self._overrides = overrides
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: Any = None
        self._service: QueueServiceClient | None = None
        self._clients: dict[str, QueueClient] = {}

    @classmethod
    def beside(cls, storage: AzureQueueStorage, **overrides: Any) -> AioAzureQueueStorage:
        """The same account as the threaded ``storage``, with the same credential: a key, a SAS,
        or a Microsoft Entra ID token credential, whose token fetches (about one an hour) then
        run on a worker thread (``ThreadedTokenCredential``)."""
        service = storage.service_client
        credential = service.credential
        if hasattr(credential, "get_token") and not _is_async_token_credential(credential):
            credential = ThreadedTokenCredential(credential)
        return cls(service.url, credential, **overrides)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the store is open on; None before its first call and after ``aclose``."""
        return self._loop

    def _client(self, queue_name: str) -> QueueClient:
        service = self._opened()  # checks the loop on every call, cached client or not
        client = self._clients.get(queue_name)
        if client is None:
            client = self._clients[queue_name] = service.get_queue_client(queue_name)
        return client

    def _opened(self) -> QueueServiceClient:
        """The service client on the running loop, opened by the first call there."""
        running = asyncio.get_running_loop()
        if self._service is not None and self._loop is running:
            return self._service
        if self._service is not None:
            raise RuntimeError(
                "this AioAzureQueueStorage is open on another event loop: await aclose() there "
                "first, or give each loop a store of its own"
            )
        self._session = new_session(keepalive_s=self._keepalive_s)
        # The transport is ours, so its connection options (a CA to trust, a client
        # certificate) go to it: given to the client, they would not reach a transport passed in.
        overrides = dict(self._overrides)
        tls = {key: overrides.pop(key) for key in TRANSPORT_OPTIONS if key in overrides}
        transport = AioHttpTransport(session=self._session, session_owner=False, **tls)
        options = aio_client_options(transport=transport, **overrides)
        self._service = QueueServiceClient(
            self._account_url, credential=self._credential, **options
        )
        self._loop = running
        return self._service

    async def create_queue(self, queue_name: str) -> None:
        validate_queue_name(queue_name)
        with translated("create_queue", queue_name):
            try:
                await self._client(queue_name).create_queue()
            except ResourceExistsError as err:
                # 204/409 QueueAlreadyExists is success here; 409 QueueBeingDeleted is not.
                if error_code(err) == "QueueBeingDeleted":
                    raise

    async def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        check_get_arguments(max_messages, visibility_timeout_s)
        with translated("get_messages", queue_name):
            pages = (
                self._client(queue_name)
                .receive_messages(
                    messages_per_page=max_messages,
                    max_messages=max_messages,
                    visibility_timeout=visibility_timeout_s,
                )
                .by_page()
            )
            # One page is one Get Messages request (iterating items would ask again on a short
            # page, as in AzureQueueStorage.get_messages).
            page = await anext(pages, None)
            return [] if page is None else [_to_message(m) async for m in page]

    async def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        try:
            with translated("delete_message", queue_name):
                await self._client(queue_name).delete_message(message_id, pop_receipt)
        except errors.MessageNotFoundError as err:
            AzureQueueStorage.log_not_deleted(queue_name, message_id, err)
            return False
        return True

    async def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        check_put_arguments(content, time_to_live_s, visibility_delay_s)
        with translated("put_message", queue_name):
            sent = await self._client(queue_name).send_message(
                content, visibility_timeout=visibility_delay_s, time_to_live=time_to_live_s
            )
        return _to_message(sent)

    async def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        check_update_arguments(visibility_timeout_s, content)
        with translated("update_visibility", queue_name):
            updated = await self._client(queue_name).update_message(
                message_id, pop_receipt, content=content, visibility_timeout=visibility_timeout_s
            )
        if not updated.pop_receipt:
            raise errors.StorageError(f"update_visibility on queue {queue_name!r}: no pop receipt")
        return str(updated.pop_receipt)

    async def approximate_message_count(self, queue_name: str) -> int:
        with translated("approximate_message_count", queue_name):
            properties = await self._client(queue_name).get_queue_properties()
        return int(properties.approximate_message_count or 0)

    async def aclose(self) -> None:
        """Close the clients and the session, on the loop they were opened on."""
        if self._service is None:
            return
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("close an AioAzureQueueStorage on the event loop that opened it")
        service, session, clients = self._service, self._session, list(self._clients.values())
        self._service, self._session, self._loop, self._clients = None, None, None, {}
        for client in clients:
            await client.close()
        await service.close()
        await session.close()

    def __repr__(self) -> str:
        return f"AioAzureQueueStorage(open={self._service is not None})"


def _is_async_token_credential(credential: object) -> bool:
    import inspect

    return inspect.iscoroutinefunction(getattr(credential, "get_token", None))
