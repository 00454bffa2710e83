"""What ``cloudqueue groups`` and the dashboard show of a group: counts, age, members pending.

A group's row is the ledger's status with its age: from its start to its end, or to now while
members are pending. The members listed as pending are the first few only (a group may have
millions); their count is always whole.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cloudqueue.listener.workflows.group_ledger import GroupLedger, GroupStatus

PENDING_SHOWN = 20
"""Pending member ids shown by ``groups show``: enough to find a stuck one, short to read."""


def group_row(group: GroupStatus, now: datetime) -> dict[str, Any]:
    """One group's counts, times and state, JSON-ready."""
    end = group.ended or now
    return {
        "group": group.group_id,
        "state": state_of(group),
        "total": group.total,
        "handled": group.handled,
        "poisoned": group.poisoned,
        "pending": group.pending,
        "age_s": round((end - group.started).total_seconds(), 3),
        "started": group.started.isoformat(),
        "ended": None if group.ended is None else group.ended.isoformat(),
        "on_complete": group.on_complete,
    }


def group_detail(
    ledger: GroupLedger, group_id: str, now: datetime, *, shown: int = PENDING_SHOWN
) -> dict[str, Any] | None:
    """The group's row plus its first ``shown`` pending members; None when unknown."""
    group = ledger.status(group_id)
    if group is None:
        return None
    return {**group_row(group, now), "pending_members": ledger.pending_members(group_id, shown)}


def group_rows(
    ledger: GroupLedger, now: datetime, *, limit: int, running_only: bool = False
) -> list[dict[str, Any]]:
    """The newest ``limit`` groups (only those with members pending when ``running_only``)."""
    groups = ledger.newest(limit)
    return [group_row(group, now) for group in groups if not (running_only and group.done)]


RECENT_S = 600.0
"""The dashboard keeps a finished group in view this long after its end, then drops it."""


def dashboard_rows(ledger: GroupLedger, now: datetime, *, limit: int = 20) -> list[dict[str, Any]]:
    """What the dashboard shows: the newest groups still running or ended in the last
    ``RECENT_S``, at most ``limit``."""
    return [
        group_row(group, now)
        for group in ledger.newest(limit)
        if group.ended is None or (now - group.ended).total_seconds() <= RECENT_S
    ]


def state_of(group: GroupStatus) -> str:
    """``running`` while members are pending; then ``completing`` until its ``GroupDone`` is
    known published, and ``done``."""
    if not group.done:
        return "running"
    return "done" if group.completion == "sent" else "completing"


__all__ = [
    "PENDING_SHOWN",
    "RECENT_S",
    "dashboard_rows",
    "group_detail",
    "group_row",
    "group_rows",
    "state_of",
]
