"""``GroupDone``: the one item a group's completion worker receives when every member settled."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from cloudqueue.listener.workflows.group_ledger import GroupStatus


class GroupDone(BaseModel):
    """A group whose every member settled: handled, or poisoned. Sent once, with the group id as
    its message key (a second copy, after a crash, is dropped by idempotent handling)."""

    model_config = ConfigDict(frozen=True)

    group_id: str
    handled: int
    poisoned: int
    started: datetime
    ended: datetime

    @property
    def total(self) -> int:
        return self.handled + self.poisoned

    @classmethod
    def of(cls, status: GroupStatus) -> GroupDone:
        """The completion of a group whose last member settled."""
        if status.ended is None:
            raise ValueError(f"group {status.group_id!r} has {status.pending} members pending")
        return cls(
            group_id=status.group_id,
            handled=status.handled,
            poisoned=status.poisoned,
            started=status.started,
            ended=status.ended,
        )


__all__ = ["GroupDone"]
