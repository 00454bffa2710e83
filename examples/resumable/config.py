"""Where the example keeps its data, from the environment (so child worker processes agree).

The queue lives where ``CLOUDQUEUE_CONNECTION_STRING`` says. The state store follows it: Azure
Table storage in the same account when that is an Azure Storage connection string (Azurite's
must name a ``TableEndpoint``), an SQLite file otherwise. The accounts database is always a
local SQLite file: it stands for the system being changed.
"""

from __future__ import annotations

import os
from pathlib import Path

from cloudqueue import ConfigurationError
from examples.resumable.sqlite_state import SqliteStateStore
from examples.resumable.state import StateStore

QUEUE = "close-account"
ACCOUNTS_ENV = "RESUMABLE_ACCOUNTS_DB"
STATE_ENV = "RESUMABLE_STATE_DB"
STEP_DELAY_ENV = "RESUMABLE_STEP_DELAY_S"
CRASH_AFTER_ENV = "RESUMABLE_CRASH_AFTER_STEP"
"""Fault injection for the demo and tests: the worker kills itself (SIGKILL) right after
recording this step as done -- a crash *between* two steps, at a known place."""

DEFAULT_STEP_DELAY_S = 0.2

EMBEDDED_STORES = ("sqlite:", "memory:")
"""Connection strings of cloudqueue's own stores; empty means the default SQLite file too."""


def accounts_path() -> Path:
    return Path(os.environ.get(ACCOUNTS_ENV) or ".cloudqueue/accounts.db")


def step_delay_s() -> float:
    """Seconds each target of a step takes (a slow remote call, in a real system)."""
    return float(os.environ.get(STEP_DELAY_ENV) or DEFAULT_STEP_DELAY_S)


def crash_after_step() -> str | None:
    return os.environ.get(CRASH_AFTER_ENV) or None


def open_state_store(connection_string: str | None) -> StateStore:
    """Azure Table storage beside Azure queues, SQLite beside the embedded store."""
    text = (connection_string or "").strip()
    if not text or text.lower().startswith(EMBEDDED_STORES):
        return SqliteStateStore(Path(os.environ.get(STATE_ENV) or ".cloudqueue/job-state.db"))
    if "=" not in text:
        # A queue service URL signs in with Entra ID; this example's table takes a key or SAS.
        raise ConfigurationError(
            "the job state table needs an Azure Storage connection string with a key or SAS"
        )
    if "tableendpoint=" not in text.lower() and "queueendpoint=" in text.lower():
        # The SDK would otherwise derive a public-cloud table host, not where the queues are.
        raise ConfigurationError(
            "the connection string names a QueueEndpoint but no TableEndpoint: add "
            "TableEndpoint=... for the job state table"
        )
    from examples.resumable.table_state import TableStateStore

    return TableStateStore.from_connection_string(text)
