"""Running handlers' progress, read from the live state of running processes.

A handler's progress report (``current_envelope().progress``) lives in the memory of the process
that holds its message, which publishes it with its live state
(``cloudqueue.workers.host.live_state``); the message itself is hidden from everyone else while it
is held. So ``cloudqueue status``, ``cloudqueue groups show`` and a group's status read progress
here, from the live-state files: no storage transaction, and only the processes that publish to
the folder (this host's, or every host's on a shared folder) are seen.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.workers.host.live_state import read_running_states


def running_progress(
    state_dir: Path,
    *,
    storage: str | None = None,
    group: str | None = None,
    now: datetime | None = None,
) -> list[HandlerProgress]:
    """The last report of every held message of the running processes (on ``storage``, when
    given), or of the members of ``group`` only; by group member, then queue and message."""
    reports = {
        (report.queue, report.message_id): report
        for state in read_running_states(state_dir, storage=storage, now=now)
        for listener in state.queues
        for report in listener.progress
        if group is None or report.group == group
    }
    return sorted(reports.values(), key=_order)


def group_progress_source(
    state_dir: Path, *, storage: str | None = None
) -> Callable[[str], list[HandlerProgress]]:
    """What a ``GroupHandle`` calls for its members' progress (its ``progress`` argument)."""

    def of_group(group_id: str) -> list[HandlerProgress]:
        return running_progress(state_dir, storage=storage, group=group_id)

    return of_group


def _order(report: HandlerProgress) -> tuple[str, str, str]:
    return (report.member or "", report.queue, report.message_id)


__all__ = ["group_progress_source", "running_progress"]
