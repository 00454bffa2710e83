"""Azure Storage Queues behind the ``QueueStorage`` protocol (azure-storage-queue 12.x).

The queue operations on the SDK's clients, one cached client per queue. The clients are built with
``azure_clients.queue_client_options`` (retries in fractions of a second, bounded timeouts, the
urllib3 transport), every SDK exception becomes a ``cloudqueue.listener.errors`` one in
``azure_errors``, and the limits the service would reject anyway are checked client-side first (the
same checks as the embedded stores'). Content is stored exactly as given (the SDK's default
no-encode policy): the project's codec does its own base64.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import structlog
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential, TokenCredential
from azure.core.exceptions import HttpResponseError, ResourceExistsError
from azure.storage.queue import QueueClient, QueueServiceClient
from azure.storage.queue import QueueMessage as SdkQueueMessage

from cloudqueue.listener import errors
from cloudqueue.listener.stores._embedded import (
    check_get_arguments,
    check_max_messages,
    check_metadata,
    check_put_arguments,
    check_update_arguments,
)
from cloudqueue.listener.stores.azure_clients import queue_client_options
from cloudqueue.listener.stores.azure_errors import error_code, translated
from cloudqueue.listener.stores.storage import QueueMessage, validate_queue_name

__all__ = ["AzureQueueStorage"]

log = structlog.get_logger(__name__)

_NEVER = datetime(9999, 12, 31, tzinfo=UTC)
"""Azure's expiry time for a message put with time-to-live -1."""

MAX_CLEAR_ATTEMPTS = 100
"""Clear Messages answers 500 OperationTimedOut when a queue is too big to clear within the
service's timeout (30 s), having deleted part of it; Microsoft says to call again until it
succeeds. Past this many such answers in a row (about an hour) give up; calling again resumes."""


def _utc(value: datetime | None, what: str) -> datetime:
    if value is None:
        raise errors.StorageError(f"storage returned a message without {what}")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _to_message(sdk_message: SdkQueueMessage, *, peeked: bool = False) -> QueueMessage:
    expires_on = _utc(sdk_message.expires_on, "an expiry time")
    inserted_on = _utc(sdk_message.inserted_on, "an insertion time")
    # A peek carries no next-visible time; the message is visible, so its insertion time is a
    # true lower bound.
    next_visible_on = sdk_message.next_visible_on or (inserted_on if peeked else None)
    return QueueMessage(
        id=sdk_message.id,
        pop_receipt=sdk_message.pop_receipt or "",
        dequeue_count=sdk_message.dequeue_count or 0,
        inserted_on=inserted_on,
        expires_on=None if expires_on >= _NEVER else expires_on,
        next_visible_on=_utc(next_visible_on, "a next-visible time"),
        content=sdk_message.content or "",
    )


Credential = TokenCredential | AzureNamedKeyCredential | AzureSasCredential


class AzureQueueStorage:
    """The queues of one Azure Storage account (or Azurite), one cached client per queue."""

    def __init__(self, service: QueueServiceClient) -> None:
        self._service = service
        self._clients: dict[str, QueueClient] = {}
        self._closers: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @classmethod
    def from_connection_string(cls, connection_string: str, **overrides: Any) -> AzureQueueStorage:
        """Connect with a connection string; ``overrides`` replace our SDK client options."""
        options = queue_client_options(**overrides)
        try:
            service = QueueServiceClient.from_connection_string(connection_string, **options)
        except ValueError:
            raise errors.ConfigurationError(
                "the Azure Storage connection string is malformed or lacks the queue endpoint"
            ) from None
        return cls(service)

    @classmethod
    def from_account_url(
        cls, account_url: str, credential: Credential, **overrides: Any
    ) -> AzureQueueStorage:
        """Connect to an account URL, e.g. with azure-identity's DefaultAzureCredential."""
        options = queue_client_options(**overrides)
        try:
            service = QueueServiceClient(account_url, credential=credential, **options)
        except ValueError:
            raise errors.ConfigurationError("the Azure Storage account URL is invalid") from None
        return cls(service)

    @property
    def service_client(self) -> QueueServiceClient:
        """The SDK's service client (its URL and credential open the aio store beside this one)."""
        return self._service

    @property
    def account_name(self) -> str:
        return str(self._service.account_name or "")

    @property
    def endpoint(self) -> str:
        """Scheme and host of the queue endpoint (never its query string, which may hold a SAS)."""
        return f"{self._service.scheme}://{self._service.primary_hostname}"

    def _client(self, queue_name: str) -> QueueClient:
        client = self._clients.get(queue_name)
        if client is None:
            with self._lock:
                client = self._clients.get(queue_name)
                if client is None:
                    client = self._service.get_queue_client(queue_name)
                    self._clients[queue_name] = client
        return client

    def create_queue(self, queue_name: str) -> None:
        validate_queue_name(queue_name)
        with translated("create_queue", queue_name):
            try:
                self._client(queue_name).create_queue()
            except ResourceExistsError as err:
                # 204/409 QueueAlreadyExists is success here; 409 QueueBeingDeleted is not.
                if error_code(err) == "QueueBeingDeleted":
                    raise
                log.debug("queue_exists", queue=queue_name)

    def get_messages(
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
            # One page is one Get Messages request. Iterating the items instead would ask again
            # whenever a page came back short, doubling the requests on a nearly empty queue.
            return [_to_message(m) for m in next(pages, [])]

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        try:
            with translated("delete_message", queue_name):
                self._client(queue_name).delete_message(message_id, pop_receipt)
        except errors.MessageNotFoundError as err:
            self.log_not_deleted(queue_name, message_id, err)
            return False
        return True

    @staticmethod
    def log_not_deleted(queue_name: str, message_id: str, err: errors.MessageNotFoundError) -> None:
        """Say why a delete found nothing to delete (the aio store's deletes say it alike)."""
        # Expected when handling outlasted the visibility timeout: another get owns the
        # message now (stale receipt) or already finished it (gone). It is not ours to delete.
        stale = isinstance(err, errors.PopReceiptMismatchError)
        reason = "pop_receipt_mismatch" if stale else "message_not_found"
        log.warning("message_not_deleted", queue=queue_name, message_id=message_id, reason=reason)

    def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        # Checked here as the embedded stores check them: the same ValueError or
        # MessageTooLargeError on every backend, and no 64 KiB round trip to be refused.
        check_put_arguments(content, time_to_live_s, visibility_delay_s)
        with translated("put_message", queue_name):
            sent = self._client(queue_name).send_message(
                content, visibility_timeout=visibility_delay_s, time_to_live=time_to_live_s
            )
        return _to_message(sent)

    def update_visibility(
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
            updated = self._client(queue_name).update_message(
                message_id, pop_receipt, content=content, visibility_timeout=visibility_timeout_s
            )
        if not updated.pop_receipt:
            raise errors.StorageError(f"update_visibility on queue {queue_name!r}: no pop receipt")
        return str(updated.pop_receipt)

    def approximate_message_count(self, queue_name: str) -> int:
        with translated("approximate_message_count", queue_name):
            properties = self._client(queue_name).get_queue_properties()
        return int(properties.approximate_message_count or 0)

    def peek_messages(self, queue_name: str, *, max_messages: int) -> list[QueueMessage]:
        check_max_messages(max_messages)
        with translated("peek_messages", queue_name):
            found = self._client(queue_name).peek_messages(max_messages=max_messages)
        return [_to_message(m, peeked=True) for m in found]

    def get_queue_metadata(self, queue_name: str) -> dict[str, str]:
        with translated("get_queue_metadata", queue_name):
            properties = self._client(queue_name).get_queue_properties()
        metadata = properties.metadata or {}
        return {str(name).lower(): str(value) for name, value in metadata.items()}

    def set_queue_metadata(self, queue_name: str, metadata: Mapping[str, str]) -> None:
        checked = check_metadata(metadata)  # refused here, as the embedded stores refuse it
        with translated("set_queue_metadata", queue_name):
            self._client(queue_name).set_queue_metadata(metadata=checked)

    def list_queues(self, prefix: str = "") -> list[str]:
        # The pager asks again (one request per 5,000 queues) until the listing is complete.
        with translated("list_queues", ""):
            listed = self._service.list_queues(name_starts_with=prefix or None)
            names = [queue.name for queue in listed]
        return sorted(names)

    def clear_queue(self, queue_name: str) -> None:
        client = self._client(queue_name)
        with translated("clear_queue", queue_name):
            for attempt in itertools.count(1):
                try:
                    client.clear_messages()
                except HttpResponseError as err:
                    if error_code(err) != "OperationTimedOut" or attempt >= MAX_CLEAR_ATTEMPTS:
                        raise
                    log.info("queue_clear_continues", queue=queue_name, attempt=attempt)
                else:
                    return

    def delete_queue(self, queue_name: str) -> None:
        validate_queue_name(queue_name)
        with translated("delete_queue", queue_name):
            self._client(queue_name).delete_queue()
        with self._lock:
            self._clients.pop(queue_name, None)

    def close_with(self, close: Callable[[], None]) -> None:
        """Call ``close`` when this storage closes, before its own client: what was opened in
        the account for it (the Table service clients of its groups and results)."""
        with self._lock:
            self._closers.append(close)

    def close(self) -> None:
        with self._lock:
            self._clients.clear()
            closers, self._closers = self._closers, []
        try:
            for close in closers:
                close()
        finally:
            self._service.close()

    def __repr__(self) -> str:
        return (
            f"AzureQueueStorage(account={self.account_name!r}, endpoint={self.endpoint!r}, "
            f"queues={len(self._clients)})"
        )
