"""Azure Storage without keys: a queue service URL plus a Microsoft Entra ID credential.

Accepted forms of the connection string when signing in with a token::

    https://ACCOUNT.queue.core.windows.net          the queue service URL; the payload store's
                                                    blob URL is derived (ACCOUNT.blob...)
    QueueEndpoint=https://...;BlobEndpoint=https://...
                                                    both URLs set on their own (custom domains,
                                                    private endpoints, Azurite)

A URL alone selects token sign-in with the ``default`` credential unless ``credential`` names
another (see ``cloudqueue.listener.stores.credentials``). Bearer tokens travel over HTTPS only, so
an ``http://`` URL is refused up front instead of on the first call. Neither form holds a secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.stores.payload_store import PayloadStore
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.stores.tick_ledger import TickLedger

__all__ = ["TokenTarget", "open_token_payload_store", "open_token_storage", "token_target"]

DEFAULT_CREDENTIAL = "default"
_SECRETS = ("ACCOUNTKEY", "SHAREDACCESSSIGNATURE")


@dataclass(frozen=True)
class TokenTarget:
    """Where the queues (and payload blobs) are, and how to get a token for them."""

    queue_url: str
    blob_url: str | None
    credential: str
    table_url: str | None = None
    """The Table service (groups, results): ``TableEndpoint=...``, or derived as the blob's."""

    @property
    def description(self) -> str:
        return f"azure at {self.queue_url} (credential {self.credential})"


def token_target(connection_string: str | None, credential: str | None) -> TokenTarget | None:
    """The token sign-in the settings describe, or None when they describe a key, SAS or SQLite."""
    text = (connection_string or "").strip()
    credential = (credential or "").strip() or None
    if text.lower().startswith(("https://", "http://")):
        queue_url = _service_url(text, "the queue service URL")
        return TokenTarget(queue_url, _derived_blob_url(text), credential or DEFAULT_CREDENTIAL,
                           _derived_url(text, "table"))  # fmt: skip
    if credential is None:
        return None
    if not text or text.startswith("sqlite:///") or text.lower() == "memory://":
        raise ConfigurationError(
            "a credential is set but the storage is not Azure: set the connection string to the "
            "queue service URL, e.g. https://ACCOUNT.queue.core.windows.net"
        )
    return _from_endpoints(text, credential)


def _from_endpoints(text: str, credential: str) -> TokenTarget:
    endpoints: dict[str, str] = {}
    for part in filter(None, (part.strip() for part in text.split(";"))):
        key, _, value = part.partition("=")
        endpoints[key.strip().upper()] = value.strip()
    if any(endpoints.get(secret) for secret in _SECRETS):
        raise ConfigurationError(
            "a credential is set and the connection string holds an AccountKey or "
            "SharedAccessSignature: use one way to sign in, not both"
        )
    queue = endpoints.get("QUEUEENDPOINT")
    if not queue:
        raise ConfigurationError(
            "signing in with a credential needs the queue service URL: "
            "https://ACCOUNT.queue.core.windows.net or QueueEndpoint=...;BlobEndpoint=..."
        )
    blob, table = endpoints.get("BLOBENDPOINT"), endpoints.get("TABLEENDPOINT")
    return TokenTarget(
        _service_url(queue, "the QueueEndpoint"),
        _service_url(blob, "the BlobEndpoint") if blob else _derived_blob_url(queue),
        credential,
        _service_url(table, "the TableEndpoint") if table else _derived_url(queue, "table"),
    )


def _service_url(url: str, what: str) -> str:
    """The URL without a trailing slash; refused unless it is https without a query."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ConfigurationError(f"{what} is not a valid URL") from None
    if parts.scheme != "https" or not parts.hostname:
        raise ConfigurationError(f"{what} must be an https:// URL: tokens are only sent over HTTPS")
    if parts.query or parts.username or parts.password:
        # A query may be a SAS; never quote it, and never mix it with a token.
        raise ConfigurationError(f"{what} must have no query string or user information")
    return f"https://{parts.netloc}{parts.path.rstrip('/')}"


def _derived_blob_url(queue_url: str) -> str | None:
    """https://ACCOUNT.blob.SUFFIX for https://ACCOUNT.queue.SUFFIX; None if not of that form."""
    return _derived_url(queue_url, "blob")


def _derived_url(queue_url: str, service: str) -> str | None:
    """https://ACCOUNT.SERVICE.SUFFIX for https://ACCOUNT.queue.SUFFIX; None if not so."""
    parts = urlsplit(queue_url)
    account, dot_queue, suffix = (parts.hostname or "").partition(".queue.")
    if not dot_queue or not account:
        return None
    return f"https://{account}.{service}.{suffix}"


def open_token_storage(target: TokenTarget) -> QueueStorage:
    """Azure queues at the target's URL, signed in with its credential."""
    from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
    from cloudqueue.listener.stores.credentials import open_credential

    return AzureQueueStorage.from_account_url(target.queue_url, open_credential(target.credential))


def open_token_payload_store(target: TokenTarget) -> PayloadStore:
    """The payload container at the target's blob URL; ConfigurationError if it has none."""
    from cloudqueue.listener.stores.azure_payloads import AzureBlobPayloadStore
    from cloudqueue.listener.stores.credentials import open_credential

    return AzureBlobPayloadStore.from_account_url(
        _blob_url(target, "to keep large payloads in blob storage"),
        open_credential(target.credential),
    )


def open_token_tick_ledger(target: TokenTarget) -> TickLedger:
    """The periodic jobs' ledger at the target's blob URL; ConfigurationError if it has none."""
    from cloudqueue.listener.stores.azure_ticks import AzureTickLedger
    from cloudqueue.listener.stores.credentials import open_credential

    return AzureTickLedger.from_account_url(
        _blob_url(target, "for periodic jobs"), open_credential(target.credential)
    )


def open_token_key_ledger(target: TokenTarget) -> KeyLedger:
    """The message keys' ledger at the target's blob URL; ConfigurationError if it has none."""
    from cloudqueue.listener.stores.azure_keys import AzureKeyLedger
    from cloudqueue.listener.stores.credentials import open_credential

    return AzureKeyLedger.from_account_url(
        _blob_url(target, "for message keys"), open_credential(target.credential)
    )


def _blob_url(target: TokenTarget, purpose: str) -> str:
    if target.blob_url is None:
        raise ConfigurationError(
            "the blob service URL cannot be derived from the queue service URL: use "
            f"QueueEndpoint=...;BlobEndpoint=... {purpose}"
        )
    return target.blob_url
