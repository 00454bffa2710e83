"""What a running handler last reported of the message it holds: ``HandlerProgress``.

A handler reports through its envelope (``current_envelope().progress(fraction, detail)``,
``cloudqueue.listener.consumer.reporting``); the report is kept on the message's lease, in this
process's memory. The host publishes the reports of its held messages with its live state, which
``cloudqueue status`` and a group's status read: showing progress costs no storage transaction.
The report also rides into the message's own text with its next visibility renewal, so the
worker that gets the message after a crash sees where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class HandlerProgress:
    """One held message's last progress report."""

    queue: str
    message_id: str
    fraction: float
    """From 0 to 1."""
    detail: str
    reported_at: str
    """When it was reported (ISO 8601, UTC)."""
    key: str | None = None
    group: str | None = None
    """The group the message is a member of (``cloudqueue.listener.workflows``), if any."""
    member: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HandlerProgress:
        """Read what ``dataclasses.asdict`` wrote (a live-state file); TypeError/ValueError if it
        is not that."""
        return cls(
            queue=str(data["queue"]),
            message_id=str(data["message_id"]),
            fraction=float(data["fraction"]),
            detail=str(data["detail"]),
            reported_at=str(data["reported_at"]),
            key=_text_or_none(data.get("key")),
            group=_text_or_none(data.get("group")),
            member=_text_or_none(data.get("member")),
        )


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)


__all__ = ["HandlerProgress"]
