"""A job's progress, kept in a state store with optimistic concurrency.

The store holds one small record per job and never locks it: every write says which version it
read (an integer version in SQLite, the entity's ETag in Azure Table storage) and is refused with
``ConflictError`` if the record changed since (HTTP 412 in Azure). ``update`` turns that into a
read-modify-write loop: read, apply the change, write if unchanged, otherwise read again.
Two deliveries of the same intent (a lease lost during a long step) can therefore both record
progress without either overwriting the other's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel

MAX_UPDATE_ATTEMPTS = 20


class ConflictError(Exception):
    """The record was created or changed by someone else since it was read."""


class JobState(BaseModel):
    """Which steps of a job are done (in the order they finished)."""

    completed_steps: list[str] = []

    def with_step_done(self, step: str) -> JobState:
        if step in self.completed_steps:
            return self  # recording a step twice changes nothing
        return JobState(completed_steps=[*self.completed_steps, step])


@dataclass(frozen=True)
class Versioned:
    """A state as read, with the version a write must name to replace it."""

    state: JobState
    version: str


class StateStore(Protocol):
    """One record per job; writes are compare-and-set on the version."""

    def load(self, job_id: str) -> Versioned | None:
        """The job's state and version, or None if it has none yet."""
        ...

    def create(self, job_id: str, state: JobState) -> Versioned:
        """Store a first state; ConflictError if the job already has one."""
        ...

    def replace(self, job_id: str, state: JobState, version: str) -> Versioned:
        """Store ``state`` if the record is still at ``version``; ConflictError otherwise."""
        ...

    def close(self) -> None: ...


def load_or_create(store: StateStore, job_id: str) -> Versioned:
    """The job's state, created empty on its first delivery."""
    current = store.load(job_id)
    if current is not None:
        return current
    try:
        return store.create(job_id, JobState())
    except ConflictError:  # another delivery created it first: read theirs
        created = store.load(job_id)
        if created is None:
            raise
        return created


def update(store: StateStore, job_id: str, change: Callable[[JobState], JobState]) -> JobState:
    """Apply ``change`` to the job's current state, retrying on conflicts; return what was stored.

    ``change`` may run several times (once per attempt), on fresh state each time, so it must be
    a pure function of the state it is given.
    """
    for _ in range(MAX_UPDATE_ATTEMPTS):
        current = load_or_create(store, job_id)
        changed = change(current.state)
        if changed == current.state:
            return changed
        try:
            return store.replace(job_id, changed, current.version).state
        except ConflictError:
            continue  # someone wrote in between: read their version and apply the change again
    raise ConflictError(f"job {job_id}: still conflicting after {MAX_UPDATE_ATTEMPTS} attempts")
