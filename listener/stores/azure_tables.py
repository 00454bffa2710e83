"""Table clients for the records that live in the account's Table service (groups, results).

The Table service holds what blob metadata holds badly: many small rows of one partition read in one
query and changed together in one entity-group transaction (up to 100 rows of a partition, all or
nothing). The tables SDK (azure-data-tables, the ``tables`` extra) builds its retry policy from
keyword arguments rather than taking the queue SDK's policy object, so the fast-retry choice of
``azure_clients`` is given here as the same numbers: a few quick tries for a blip, then the caller
decides.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from cloudqueue.listener import errors
from cloudqueue.listener.imports import import_extra
from cloudqueue.listener.stores.azure_clients import (
    CONNECTION_POOL_SIZE,
    CONNECTION_TIMEOUT_S,
    READ_TIMEOUT_S,
)
from cloudqueue.listener.stores.http_session import ca_bundle, pooled_session

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.data.tables import TableClient

__all__ = ["table_from_account_url", "table_from_connection_string", "table_options"]


def table_options(**overrides: Any) -> dict[str, Any]:
    """Keyword arguments for a table client: 3 retries from 0.1 s, bounded timeouts, our pool."""
    options: dict[str, Any] = {
        "retry_total": 3,
        "retry_backoff_factor": 0.1,
        "retry_backoff_max": 2,
        "connection_timeout": CONNECTION_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
    }
    if "transport" not in overrides and "session" not in overrides:
        options["session"] = pooled_session(CONNECTION_POOL_SIZE)
        bundle = ca_bundle()
        if bundle is not None:
            options["connection_verify"] = bundle
    return {**options, **overrides}


def table_from_connection_string(
    connection_string: str, table_name: str, **overrides: Any
) -> TableClient:
    """A client of ``table_name``, the table created when missing; ConfigurationError for a
    string without a usable table endpoint or without the ``tables`` extra installed."""
    table_client = _table_client_class()
    try:
        client = table_client.from_connection_string(
            connection_string, table_name, **table_options(**overrides)
        )
    except ValueError:
        raise errors.ConfigurationError(
            "the Azure Storage connection string is malformed or lacks the table endpoint"
        ) from None
    return _created(client)


def table_from_account_url(
    account_url: str, table_name: str, credential: TokenCredential, **overrides: Any
) -> TableClient:
    """A client of ``table_name`` signed in with a token credential (Microsoft Entra ID)."""
    table_client = _table_client_class()
    try:
        client = table_client(
            account_url, table_name, credential=credential, **table_options(**overrides)
        )
    except ValueError:
        raise errors.ConfigurationError("the table service URL is invalid") from None
    return _created(client)


def _table_client_class() -> type[TableClient]:
    tables = import_extra(
        "azure.data.tables", extra="tables", needed_by="groups and results on Azure"
    )
    client_class: type[TableClient] = tables.TableClient
    return client_class


def _created(client: TableClient) -> TableClient:
    """The client, its table made on first use (creating one that exists answers 409)."""
    from azure.core.exceptions import ResourceExistsError

    with contextlib.suppress(ResourceExistsError):
        client.create_table()
    return client
