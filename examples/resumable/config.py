"""Where the example keeps its data, from the environment (so child worker processes agree).

The queue lives where ``CLOUDQUEUE_CONNECTION_STRING`` says. The state store follows it: Azure
Table storage in the same account when that is an Azure Storage connection string (Azurite's
must name a ``TableEndpoint``), an SQLite file otherwise. The accounts database is always a
local SQLite file: it stands for the system being changed.
"""

from __future__ import annotations

import os
from pathlib import Path

from examples.resumable.sqlite_state import SqliteStateStore
from examples.resumable.state import StateStore
from listener import ConfigurationError
from listener.stores.connection import AzureTarget, parse_connection_string

QUEUE = "close-account"
ACCOUNTS_ENV = "RESUMABLE_ACCOUNTS_DB"
STATE_ENV = "RESUMABLE_STATE_DB"
STEP_DELAY_ENV = "RESUMABLE_STEP_DELAY_S"
CRASH_AFTER_ENV = "RESUMABLE_CRASH_AFTER_STEP"
"""Fault injection for the demo and tests: the worker kills itself (SIGKILL) right after
recording this step as done -- a crash *between* two steps, at a known place."""

DEFAULT_STEP_DELAY_S = 0.2


def accounts_path() -> Path:
    return Path(os.environ.get(ACCOUNTS_ENV) or ".cloudqueue/accounts.db")


def step_delay_s() -> float:
    """Seconds each target of a step takes (a slow remote call, in a real system)."""
    return float(os.environ.get(STEP_DELAY_ENV) or DEFAULT_STEP_DELAY_S)


def crash_after_step() -> str | None:
    return os.environ.get(CRASH_AFTER_ENV) or None


def open_state_store(connection_string: str | None) -> StateStore:
    """Azure Table storage beside Azure queues, SQLite beside the embedded store."""
    target = parse_connection_string(connection_string)
    if not isinstance(target, AzureTarget):
        return SqliteStateStore(Path(os.environ.get(STATE_ENV) or ".cloudqueue/job-state.db"))
    if "tableendpoint=" not in target.connection_string.lower() and (
        "queueendpoint=" in target.connection_string.lower()
    ):
        # The SDK would otherwise derive a public-cloud table host, not where the queues are.
        raise ConfigurationError(
            "the connection string names a QueueEndpoint but no TableEndpoint: add "
            "TableEndpoint=... for the job state table"
        )
    from examples.resumable.table_state import TableStateStore

    return TableStateStore.from_connection_string(target.connection_string)
