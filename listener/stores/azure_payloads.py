"""Large payloads in Azure Blob Storage, behind the ``PayloadStore`` protocol (azure-storage-blob).

The blobs live in one container of the queue's storage account, ``cloudqueue-payloads`` by default,
named ``<queue>/<32 hex digits>``; the container is created on the first put that needs it. The
SDK clients get the options of ``azure_clients.client_options``: retries measured in fractions of
a second, bounded connect and read timeouts, a pooled ``requests`` session (downloads stream).
SDK exceptions become ``cloudqueue.listener.errors`` through ``azure_errors``, with messages free of
secrets.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from azure.core.credentials import TokenCredential
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.storage.blob import ContainerClient

from cloudqueue.listener import errors
from cloudqueue.listener.redaction import redact
from cloudqueue.listener.stores.azure_clients import client_options
from cloudqueue.listener.stores.azure_errors import translate_error
from cloudqueue.listener.stores.payload_store import validate_payload_name

__all__ = [
    "DEFAULT_CONTAINER",
    "AzureBlobPayloadStore",
    "container_from_account_url",
    "container_from_connection_string",
]

log = structlog.get_logger(__name__)

DEFAULT_CONTAINER = "cloudqueue-payloads"


@contextmanager
def _translated(operation: str, name: str) -> Iterator[None]:
    """Run an SDK call, turning its exceptions into the project's (without the SDK's text)."""
    try:
        yield
    except ResourceNotFoundError as err:
        if _error_code(err) in ("BlobNotFound", "ContainerNotFound"):
            raise errors.PayloadNotFoundError(f"payload {name!r} not found") from None
        raise _translate(err, operation, name) from None
    except AzureError as err:
        raise _translate(err, operation, name) from None


def _translate(err: AzureError, operation: str, name: str) -> errors.StorageError:
    translated = translate_error(err, operation=f"{operation} of payload {name!r}", queue_name="")
    log.debug("storage_call_failed", error=str(translated), detail=redact(str(err)).split("\n")[0])
    return translated


def _error_code(err: AzureError) -> str:
    return str(getattr(err, "error_code", None) or "")


def container_from_connection_string(
    connection_string: str, container_name: str, **overrides: Any
) -> ContainerClient:
    """A container client with our SDK options; ConfigurationError for a malformed string."""
    try:
        return ContainerClient.from_connection_string(
            connection_string, container_name, **client_options(**overrides)
        )
    except ValueError:
        raise errors.ConfigurationError(
            "the Azure Storage connection string is malformed or lacks the blob endpoint"
        ) from None


def container_from_account_url(
    account_url: str, container_name: str, credential: TokenCredential, **overrides: Any
) -> ContainerClient:
    """A container client signed in with a token credential (Microsoft Entra ID)."""
    try:
        return ContainerClient(
            account_url, container_name, credential=credential, **client_options(**overrides)
        )
    except ValueError:
        raise errors.ConfigurationError("the blob service URL is invalid") from None


class AzureBlobPayloadStore:
    """Payloads as block blobs in one container."""

    def __init__(self, container: ContainerClient) -> None:
        self._container = container

    @classmethod
    def from_connection_string(
        cls, connection_string: str, *, container_name: str = DEFAULT_CONTAINER, **overrides: Any
    ) -> AzureBlobPayloadStore:
        """Connect with a connection string naming the blob endpoint (or a standard account
        string, from which the SDK derives it); ``overrides`` replace our SDK client options."""
        return cls(container_from_connection_string(connection_string, container_name, **overrides))

    @classmethod
    def from_account_url(
        cls,
        account_url: str,
        credential: TokenCredential,
        *,
        container_name: str = DEFAULT_CONTAINER,
        **overrides: Any,
    ) -> AzureBlobPayloadStore:
        """Connect to a blob service URL with a token credential (Microsoft Entra ID)."""
        return cls(container_from_account_url(account_url, container_name, credential, **overrides))

    @property
    def container_name(self) -> str:
        return str(self._container.container_name)

    def put(self, name: str, data: bytes) -> None:
        validate_payload_name(name)
        try:
            self._upload(name, data)
        except errors.PayloadNotFoundError:
            # The container is missing (first use, or someone deleted it): create it, try again.
            self._create_container()
            self._upload(name, data)

    def get(self, name: str, *, max_bytes: int | None = None) -> bytes:
        validate_payload_name(name)
        if max_bytes is None:
            with _translated("get", name):
                return self._container.download_blob(name).readall()
        # A ranged read: a blob larger than the caller's limit costs one byte past the limit.
        with _translated("get", name):
            try:
                return self._container.download_blob(name, offset=0, length=max_bytes + 1).readall()
            except HttpResponseError as err:
                if err.status_code == 416:  # InvalidRange
                    return b""  # only an empty blob (a tombstone) has no byte 0 to start at
                raise

    def delete(self, name: str) -> None:
        validate_payload_name(name)
        try:
            with _translated("delete", name):
                self._container.delete_blob(name)
        except errors.PayloadNotFoundError:
            log.debug("payload_already_deleted", payload=name)

    def names(self) -> list[str]:
        """Every stored name, sorted (for tests and tooling; one request per 5,000 names)."""
        try:
            with _translated("list", self.container_name):
                return sorted(self._container.list_blob_names())
        except errors.PayloadNotFoundError:
            return []  # no container yet: nothing stored

    def close(self) -> None:
        self._container.close()

    def _upload(self, name: str, data: bytes) -> None:
        # overwrite=True: names are unique, and an SDK retry of an upload that had in fact
        # succeeded must not fail with BlobAlreadyExists.
        with _translated("put", name):
            self._container.upload_blob(name, data, overwrite=True)

    def _create_container(self) -> None:
        with _translated("create_container", self.container_name):
            try:
                self._container.create_container()
            except ResourceExistsError:
                log.debug("payload_container_exists", container=self.container_name)
            else:
                log.info("payload_container_created", container=self.container_name)

    def __repr__(self) -> str:
        return f"AzureBlobPayloadStore(container={self.container_name!r})"
