"""From a connection string to a storage backend, and a description of it that is safe to print.

Accepted forms (``open_storage`` needs one: the settings, not this module, decide that none
means the embedded store at ``DEFAULT_CONNECTION_STRING``)::

    sqlite:///relative/path.db           SQLite, relative to the working directory (three slashes)
    sqlite:////absolute/path.db          SQLite at an absolute path (four slashes)
    memory://                            in-memory, lost when the process exits
    AccountName=...;AccountKey=...;...   Azure Storage (or SharedAccessSignature=..., or
    UseDevelopmentStorage=true           Azurite on its default port)
    https://ACCOUNT.queue.core.windows.net
                                         Azure Storage, signed in with Microsoft Entra ID
                                         (``credential``; see stores.token_connection)

``parse_connection_string`` reads a string once into one typed ``StorageTarget``; the rest
(opening, describing, the identity triggers use) works from that. ``open_payload_store`` opens
the matching store for payloads too large for a message: a folder ``payloads/`` beside the SQLite
file, memory, or a blob container of the same Azure account.

Connection strings hold secrets, so no error message here ever quotes one: each says which part is
missing or malformed.
"""

from __future__ import annotations

import base64
import binascii
import re
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import structlog

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.payload_store import (
    FolderPayloadStore,
    InMemoryPayloadStore,
    PayloadStore,
)
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.stores.tick_ledger import TickLedger
from cloudqueue.listener.stores.token_connection import (
    TokenTarget,
    open_token_payload_store,
    open_token_storage,
    open_token_tick_ledger,
    token_target,
)

log = structlog.get_logger(__name__)

__all__ = [
    "DEFAULT_CONNECTION_STRING",
    "DEFAULT_PATH",
    "AzureTarget",
    "MemoryTarget",
    "SqliteTarget",
    "StorageTarget",
    "azure_origin",
    "check_table_endpoint",
    "describe_storage",
    "open_payload_store",
    "open_storage",
    "open_tick_ledger",
    "outlives_process",
    "parse_connection_string",
]

DEFAULT_PATH = Path(".cloudqueue/queues.db")
DEFAULT_CONNECTION_STRING = f"sqlite:///{DEFAULT_PATH}"
"""The embedded store the settings name when they name none."""

_SQLITE_PREFIX = "sqlite:///"
_MEMORY = "memory://"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_DEVELOPMENT_ACCOUNT = "devstoreaccount1"
_DEVELOPMENT_ENDPOINT = "http://127.0.0.1:10001"
_USAGE = "use sqlite:///PATH, memory:// or an Azure Storage connection string"


@dataclass(frozen=True)
class SqliteTarget:
    """The embedded SQLite store at ``path`` (absolute: resolved against the working directory)."""

    path: Path

    @property
    def description(self) -> str:
        return f"sqlite {self.path}"

    @property
    def account(self) -> str:
        return f"sqlite:{self.path}"


@dataclass(frozen=True)
class MemoryTarget:
    """The in-memory store of this process."""

    description: str = "memory"
    account: str = "memory"


@dataclass(frozen=True)
class AzureTarget:
    """An Azure Storage account (or Azurite); the connection string is kept out of ``repr``."""

    description: str
    account: str
    """The account name, or ``azure`` when a shared access signature names none."""
    connection_string: str = field(repr=False)


StorageTarget = SqliteTarget | MemoryTarget | AzureTarget

AzureOrigin = AzureTarget | TokenTarget
"""How an Azure storage was opened: a connection string, or a token sign-in."""

_AZURE_ORIGINS: weakref.WeakKeyDictionary[QueueStorage, AzureOrigin] = weakref.WeakKeyDictionary()


def azure_origin(storage: QueueStorage) -> AzureOrigin | None:
    """How ``open_storage`` opened this Azure storage, so that the account's other services (the
    Table service of groups) are opened the same way; None for a storage it did not open."""
    return _AZURE_ORIGINS.get(storage)


def _remembered(storage: QueueStorage, origin: AzureOrigin) -> QueueStorage:
    _AZURE_ORIGINS[storage] = origin
    return storage


def open_storage(connection_string: str, *, credential: str | None = None) -> QueueStorage:
    """The storage backend the connection string names; raises ConfigurationError if it is
    malformed or missing.

    ``credential`` (the ``credential`` setting) signs in to Azure with Microsoft Entra ID. To
    open the store the workers' settings name (environment, ``.env``, TOML file, credential),
    use ``cloudqueue.workers.open_storage_from_settings()`` instead.
    """
    if not (connection_string or "").strip():
        # Once the default file, silently: a producer that meant "what the workers use" wrote
        # to another store than workers configured by CLOUDQUEUE_CONNECTION_STRING.
        raise ConfigurationError(
            "open_storage needs a connection string (sqlite:///PATH, memory:// or Azure "
            "Storage's): cloudqueue.workers.open_storage_from_settings() opens the one the "
            "workers' settings name"
        )
    token = token_target(connection_string, credential)
    if token is not None:
        return _remembered(open_token_storage(token), token)
    target = parse_connection_string(connection_string)
    if isinstance(target, MemoryTarget):
        from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage

        return InMemoryQueueStorage()
    if isinstance(target, SqliteTarget):
        from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage

        return SqliteQueueStorage(target.path)
    # Imported here so that only Azure users pay for importing the Azure SDK.
    from cloudqueue.listener.stores.azure_storage import AzureQueueStorage

    storage = AzureQueueStorage.from_connection_string(target.connection_string)
    return _remembered(storage, target)


def open_payload_store(
    connection_string: str | None,
    *,
    default_path: Path = DEFAULT_PATH,
    credential: str | None = None,
) -> PayloadStore:
    """The payload store that goes with ``open_storage(connection_string)``.

    SQLite: the folder ``payloads`` beside the database file. Memory: a new in-memory store (share
    one instance between publisher and listener). Azure: the ``cloudqueue-payloads`` container of
    the same account; a string that lists endpoints must list a BlobEndpoint too.
    """
    token = token_target(connection_string, credential)
    if token is not None:
        return open_token_payload_store(token)
    target = parse_connection_string(connection_string, default_path=default_path)
    if isinstance(target, MemoryTarget):
        return InMemoryPayloadStore()
    if isinstance(target, SqliteTarget):
        return FolderPayloadStore(target.path.parent / "payloads")
    check_blob_endpoint(target.connection_string)
    # Imported here so that only Azure users pay for importing the Azure SDK.
    from cloudqueue.listener.stores.azure_payloads import AzureBlobPayloadStore

    return AzureBlobPayloadStore.from_connection_string(target.connection_string)


def open_tick_ledger(
    connection_string: str | None,
    *,
    default_path: Path = DEFAULT_PATH,
    credential: str | None = None,
) -> TickLedger:
    """The ledger of periodic jobs' ticks in the store the connection string names.

    SQLite: a table in the same file. Memory: a new in-memory ledger (this process only). Azure:
    the ``cloudqueue-jobs`` blob container of the same account.
    """
    token = token_target(connection_string, credential)
    if token is not None:
        return open_token_tick_ledger(token)
    target = parse_connection_string(connection_string, default_path=default_path)
    if isinstance(target, MemoryTarget):
        from cloudqueue.listener.stores.tick_ledger import InMemoryTickLedger

        return InMemoryTickLedger()
    if isinstance(target, SqliteTarget):
        from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
        from cloudqueue.listener.stores.tick_ledger import SqliteTickLedger

        return SqliteTickLedger(SqliteQueueStorage(target.path))
    check_blob_endpoint(target.connection_string)
    from cloudqueue.listener.stores.azure_ticks import AzureTickLedger

    return AzureTickLedger.from_connection_string(target.connection_string)


def describe_storage(
    connection_string: str | None,
    *,
    default_path: Path = DEFAULT_PATH,
    credential: str | None = None,
) -> str:
    """A one-line description without secrets, e.g. "azure account NAME at https://HOST"."""
    token = token_target(connection_string, credential)
    if token is not None:
        return token.description
    return parse_connection_string(connection_string, default_path=default_path).description


def outlives_process(connection_string: str | None) -> bool:
    """Whether queues in this store remain after the process exits (all but ``memory://``)."""
    # Not parsed here: a token sign-in target needs its credential, and opening checks it all.
    return (connection_string or "").strip().lower() != "memory://"


def parse_connection_string(
    connection_string: str | None, *, default_path: Path = DEFAULT_PATH
) -> StorageTarget:
    """The store a connection string names; raises ConfigurationError if malformed."""
    text = (connection_string or "").strip()
    if not text:
        return SqliteTarget(default_path.resolve())
    if text.startswith(_SQLITE_PREFIX):
        relative_or_absolute = text.removeprefix(_SQLITE_PREFIX)
        if not relative_or_absolute:
            raise ConfigurationError("the sqlite connection string has no path: sqlite:///PATH")
        return SqliteTarget(Path(relative_or_absolute).resolve())
    if text.lower() == _MEMORY:
        return MemoryTarget()
    if text.lower().startswith("sqlite:"):
        raise ConfigurationError(
            "a sqlite connection string needs three slashes: sqlite:///relative/path.db, or "
            "four for an absolute path: sqlite:////absolute/path.db"
        )
    scheme = _SCHEME.match(text)
    if scheme:
        # A scheme is not a secret (a URL's user, password or query might be, so none is quoted).
        raise ConfigurationError(f"unsupported connection string scheme {scheme[1]!r}: {_USAGE}")
    return _parse_azure(text)


def _parse_azure(connection_string: str) -> AzureTarget:
    settings = _settings(connection_string)
    if settings.get("USEDEVELOPMENTSTORAGE", "").lower() == "true":
        # The SDK only understands the lowercase "true"; hand it the canonical form.
        description = f"azure account {_DEVELOPMENT_ACCOUNT} at {_DEVELOPMENT_ENDPOINT}"
        return AzureTarget(
            description, _DEVELOPMENT_ACCOUNT, connection_string="UseDevelopmentStorage=true"
        )
    account = settings.get("ACCOUNTNAME")
    _check_credentials(settings, account)
    endpoint = _queue_endpoint(settings, account)
    who = f"azure account {account}" if account else "azure (shared access signature)"
    return AzureTarget(
        f"{who} at {endpoint}", account or "azure", connection_string=connection_string
    )


def check_blob_endpoint(connection_string: str) -> None:
    """A string that names its endpoints (Azurite, SAS, custom domains) must name the blob one:
    the SDK would otherwise derive a public-cloud blob host that is not where the queues are."""
    settings = _settings(connection_string)
    if "QUEUEENDPOINT" in settings and "BLOBENDPOINT" not in settings:
        raise ConfigurationError(
            "the Azure Storage connection string names a QueueEndpoint but no BlobEndpoint: add "
            "BlobEndpoint=... to keep large payloads in blob storage"
        )


def check_table_endpoint(connection_string: str) -> None:
    """As ``check_blob_endpoint``, for the Table service that holds groups and results."""
    settings = _settings(connection_string)
    if "QUEUEENDPOINT" in settings and "TABLEENDPOINT" not in settings:
        raise ConfigurationError(
            "the Azure Storage connection string names a QueueEndpoint but no TableEndpoint: add "
            "TableEndpoint=... to keep groups and results in the Table service"
        )


def _settings(connection_string: str) -> dict[str, str]:
    """The Key=Value settings, keys uppercased as the SDK reads them; empty values dropped."""
    settings: dict[str, str] = {}
    for index, part in enumerate(connection_string.split(";"), start=1):
        if not part.strip():
            continue
        key, equals, value = part.partition("=")
        if not equals or not key.strip():
            raise ConfigurationError(
                f"the connection string is malformed: part {index} is not Key=Value ({_USAGE})"
            )
        if value.strip():
            settings[key.strip().upper()] = value.strip()
    return settings


def _check_credentials(settings: dict[str, str], account: str | None) -> None:
    key = settings.get("ACCOUNTKEY")
    if key is None and "SHAREDACCESSSIGNATURE" not in settings:
        raise ConfigurationError(
            "the Azure Storage connection string has neither AccountKey nor "
            "SharedAccessSignature (nor UseDevelopmentStorage=true)"
        )
    if key is not None:
        if account is None:
            raise ConfigurationError("the Azure Storage connection string has no AccountName")
        try:
            base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(
                "the AccountKey in the Azure Storage connection string is not valid base64"
            ) from None
    elif account is None and "QUEUEENDPOINT" not in settings:
        raise ConfigurationError(
            "the Azure Storage connection string has neither AccountName nor QueueEndpoint"
        )


def _queue_endpoint(settings: dict[str, str], account: str | None) -> str:
    """Scheme and host of the queue endpoint (path and query dropped: a query may hold a SAS)."""
    explicit = settings.get("QUEUEENDPOINT")
    if explicit is None:
        protocol = settings.get("DEFAULTENDPOINTSPROTOCOL", "https")
        suffix = settings.get("ENDPOINTSUFFIX", "core.windows.net")
        return f"{protocol}://{account}.queue.{suffix}"
    try:
        parts = urlsplit(explicit)
        port = parts.port
    except ValueError:
        port, parts = None, urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError("the QueueEndpoint in the connection string is not an http(s) URL")
    host = parts.hostname if port is None else f"{parts.hostname}:{port}"
    return f"{parts.scheme}://{host}"


def open_payload_store_if_available(
    connection_string: str | None, *, credential: str | None = None
) -> PayloadStore | None:
    """The payload store for this storage, or None when it has none (a queue-only Azure string).

    Without a store, items too large for a message are refused with a clear error instead.
    """
    try:
        return open_payload_store(connection_string, credential=credential)
    except ConfigurationError as reason:
        log.info("payload_store_unavailable", reason=str(reason))
        return None
