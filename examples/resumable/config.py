"""Where the example keeps its data, from the environment (so child worker processes agree).

The queue lives where ``CLOUDQUEUE_CONNECTION_STRING`` says, and each job's progress travels in
its own message (its checkpoint). The accounts database is always a local SQLite file: it stands
for the system being changed.
"""

from __future__ import annotations

import os
from pathlib import Path

QUEUE = "close-account"
ACCOUNTS_ENV = "RESUMABLE_ACCOUNTS_DB"
STEP_DELAY_ENV = "RESUMABLE_STEP_DELAY_S"
CRASH_AFTER_ENV = "RESUMABLE_CRASH_AFTER_STEP"
"""Fault injection for the demo and tests: the worker kills itself (SIGKILL) right after
checkpointing this step as done -- a crash *between* two steps, at a known place."""

DEFAULT_STEP_DELAY_S = 0.2


def accounts_path() -> Path:
    return Path(os.environ.get(ACCOUNTS_ENV) or ".cloudqueue/accounts.db")


def step_delay_s() -> float:
    """Seconds each target of a step takes (a slow remote call, in a real system)."""
    return float(os.environ.get(STEP_DELAY_ENV) or DEFAULT_STEP_DELAY_S)


def crash_after_step() -> str | None:
    return os.environ.get(CRASH_AFTER_ENV) or None
