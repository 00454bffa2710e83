"""Azure Storage Queues behind the ``QueueStorage`` protocol (azure-storage-queue 12.x).

The only module that imports the Azure SDK. On top of the SDK it adds a retry policy measured in
fractions of a second, translation of SDK exceptions into ``listener.errors`` at one boundary
(``translate_error``, with messages free of secrets), and client-side checks of the limits the
service would reject anyway (the same checks as the embedded stores'). Content is stored exactly
as given (the SDK's default no-encode policy): the project's codec does its own base64.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import structlog
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential, TokenCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    IncompleteReadError,
    ResourceExistsError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.queue import ExponentialRetry, QueueClient, QueueServiceClient
from azure.storage.queue import QueueMessage as SdkQueueMessage

from listener import errors
from listener.redaction import redact
from listener.stores._embedded import (
    check_get_arguments,
    check_max_messages,
    check_metadata,
    check_put_arguments,
    check_update_arguments,
)
from listener.stores.http_session import ca_bundle, pooled_session
from listener.stores.storage import QueueMessage, validate_queue_name

__all__ = ["AzureQueueStorage", "FastRetry", "translate_error"]

log = structlog.get_logger(__name__)

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

_NEVER = datetime(9999, 12, 31, tzinfo=UTC)
"""Azure's expiry time for a message put with time-to-live -1."""

MAX_CLEAR_ATTEMPTS = 100
"""Clear Messages answers 500 OperationTimedOut when a queue is too big to clear within the
service's timeout (30 s), having deleted part of it; Microsoft says to call again until it
succeeds. Past this many such answers in a row (about an hour) give up; calling again resumes."""


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


def client_options(**overrides: Any) -> dict[str, Any]:
    """Keyword arguments for the SDK clients: fast retries, bounded timeouts, a bigger pool.

    ``overrides`` win; a caller bringing its own ``transport`` or ``session`` gets no pool of ours.
    """
    options: dict[str, Any] = {
        "retry_policy": FastRetry(),
        "connection_timeout": CONNECTION_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
    }
    if "transport" not in overrides and "session" not in overrides:
        options["session"] = pooled_session(CONNECTION_POOL_SIZE)
        bundle = ca_bundle()
        if bundle is not None:  # what requests would read per request, read once
            options["connection_verify"] = bundle
    return {**options, **overrides}


_ERRORS_BY_CODE: dict[str, type[errors.StorageError]] = {
    "QueueNotFound": errors.QueueNotFoundError,
    "MessageNotFound": errors.MessageNotFoundError,
    "PopReceiptMismatch": errors.PopReceiptMismatchError,
    "RequestBodyTooLarge": errors.MessageTooLargeError,
    # Azure takes 30 s or more to delete a queue; re-creating it meanwhile is refused.
    "QueueBeingDeleted": errors.TransientStorageError,
}
_TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_HINTS = {
    "AuthenticationFailed": "storage refused the key, SAS or token: check it is for this account, "
    "not expired, and (a token) issued for the audience https://storage.azure.com",
    "AuthorizationPermissionMismatch": "the SAS lacks the permission, or the identity a data "
    "role, for this operation (see the least-privilege table in the README)",
    "AuthorizationFailure": "the SAS or identity may not do this here (permissions, IP, network)",
}


def translate_error(err: AzureError, *, operation: str, queue_name: str) -> errors.StorageError:
    """The project's error for an SDK exception, its message built from safe parts only.

    SDK messages can quote request URLs (with a SAS ``sig=``) or account names, so the message
    names the operation, queue, status and error code, never the SDK's text.
    """
    where = f"{operation} on queue {queue_name!r} failed" if queue_name else f"{operation} failed"
    if isinstance(err, ClientAuthenticationError) and err.response is None:
        # Raised before any request by a credential that could not get a token; the message is
        # NamedCredential's own one line (which credential, why), never a token.
        return errors.StorageError(f"{where}: {err.message}")
    if isinstance(err, ServiceRequestError | ServiceResponseError | IncompleteReadError):
        return errors.TransientStorageError(f"{where}: {type(err).__name__} (no usable response)")
    if not isinstance(err, HttpResponseError):
        return errors.StorageError(f"{where}: {type(err).__name__}")
    status = err.status_code
    code = _error_code(err)
    message = f"{where}: HTTP {status} {code}".rstrip()
    if code in _HINTS:
        message = f"{message}: {_HINTS[code]}"
    error_type = _ERRORS_BY_CODE.get(code)
    if error_type is None:
        transient = status is not None and status in _TRANSIENT_STATUSES
        error_type = errors.TransientStorageError if transient else errors.StorageError
    return error_type(message)


def _error_code(err: HttpResponseError) -> str:
    # The SDK gives a StorageErrorCode enum for some errors and a plain string for others.
    code = getattr(err, "error_code", None)
    if isinstance(code, Enum):
        return str(code.value)
    return str(code or "")


@contextmanager
def _translated(operation: str, queue_name: str) -> Iterator[None]:
    """Run an SDK call, turning its exceptions into the project's (without the SDK's text)."""
    try:
        yield
    except AzureError as err:
        translated = translate_error(err, operation=operation, queue_name=queue_name)
        # The SDK's own text, redacted and cut to its first line (the rest is the raw XML body),
        # is kept for diagnosis in a debug event rather than in the exception.
        detail = redact(str(err)).partition("\n")[0]
        log.debug("storage_call_failed", error=str(translated), detail=detail)
        raise translated from None


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
        self._lock = threading.Lock()

    @classmethod
    def from_connection_string(cls, connection_string: str, **overrides: Any) -> AzureQueueStorage:
        """Connect with a connection string; ``overrides`` replace our SDK client options."""
        options = client_options(**overrides)
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
        options = client_options(**overrides)
        try:
            service = QueueServiceClient(account_url, credential=credential, **options)
        except ValueError:
            raise errors.ConfigurationError("the Azure Storage account URL is invalid") from None
        return cls(service)

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
        with _translated("create_queue", queue_name):
            try:
                self._client(queue_name).create_queue()
            except ResourceExistsError as err:
                # 204/409 QueueAlreadyExists is success here; 409 QueueBeingDeleted is not.
                if _error_code(err) == "QueueBeingDeleted":
                    raise
                log.debug("queue_exists", queue=queue_name)

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        check_get_arguments(max_messages, visibility_timeout_s)
        with _translated("get_messages", queue_name):
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
            with _translated("delete_message", queue_name):
                self._client(queue_name).delete_message(message_id, pop_receipt)
        except errors.MessageNotFoundError as err:
            # Expected when handling outlasted the visibility timeout: another get owns the
            # message now (stale receipt) or already finished it (gone). It is not ours to delete.
            stale = isinstance(err, errors.PopReceiptMismatchError)
            reason = "pop_receipt_mismatch" if stale else "message_not_found"
            log.warning(
                "message_not_deleted", queue=queue_name, message_id=message_id, reason=reason
            )
            return False
        return True

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
        with _translated("put_message", queue_name):
            sent = self._client(queue_name).send_message(
                content, visibility_timeout=visibility_delay_s, time_to_live=time_to_live_s
            )
        return _to_message(sent)

    def update_visibility(
        self, queue_name: str, message_id: str, pop_receipt: str, visibility_timeout_s: int
    ) -> str:
        check_update_arguments(visibility_timeout_s)
        with _translated("update_visibility", queue_name):
            updated = self._client(queue_name).update_message(
                message_id, pop_receipt, visibility_timeout=visibility_timeout_s
            )
        if not updated.pop_receipt:
            raise errors.StorageError(f"update_visibility on queue {queue_name!r}: no pop receipt")
        return str(updated.pop_receipt)

    def approximate_message_count(self, queue_name: str) -> int:
        with _translated("approximate_message_count", queue_name):
            properties = self._client(queue_name).get_queue_properties()
        return int(properties.approximate_message_count or 0)

    def peek_messages(self, queue_name: str, *, max_messages: int) -> list[QueueMessage]:
        check_max_messages(max_messages)
        with _translated("peek_messages", queue_name):
            found = self._client(queue_name).peek_messages(max_messages=max_messages)
        return [_to_message(m, peeked=True) for m in found]

    def get_queue_metadata(self, queue_name: str) -> dict[str, str]:
        with _translated("get_queue_metadata", queue_name):
            properties = self._client(queue_name).get_queue_properties()
        metadata = properties.metadata or {}
        return {str(name).lower(): str(value) for name, value in metadata.items()}

    def set_queue_metadata(self, queue_name: str, metadata: Mapping[str, str]) -> None:
        checked = check_metadata(metadata)  # refused here, as the embedded stores refuse it
        with _translated("set_queue_metadata", queue_name):
            self._client(queue_name).set_queue_metadata(metadata=checked)

    def list_queues(self, prefix: str = "") -> list[str]:
        # The pager asks again (one request per 5,000 queues) until the listing is complete.
        with _translated("list_queues", ""):
            listed = self._service.list_queues(name_starts_with=prefix or None)
            names = [queue.name for queue in listed]
        return sorted(names)

    def clear_queue(self, queue_name: str) -> None:
        client = self._client(queue_name)
        with _translated("clear_queue", queue_name):
            for attempt in itertools.count(1):
                try:
                    client.clear_messages()
                except HttpResponseError as err:
                    if _error_code(err) != "OperationTimedOut" or attempt >= MAX_CLEAR_ATTEMPTS:
                        raise
                    log.info("queue_clear_continues", queue=queue_name, attempt=attempt)
                else:
                    return

    def delete_queue(self, queue_name: str) -> None:
        validate_queue_name(queue_name)
        with _translated("delete_queue", queue_name):
            self._client(queue_name).delete_queue()
        with self._lock:
            self._clients.pop(queue_name, None)

    def close(self) -> None:
        with self._lock:
            self._clients.clear()
        self._service.close()

    def __repr__(self) -> str:
        return (
            f"AzureQueueStorage(account={self.account_name!r}, endpoint={self.endpoint!r}, "
            f"queues={len(self._clients)})"
        )
