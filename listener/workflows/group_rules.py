"""The rules every group ledger applies, whatever its store: members numbered from 0 in the order
they join, a count of at least one, a settled member counted, a repeated addition or chain step
answered with what it got before, and no member added to a group unknown or complete
(``cloudqueue.listener.workflows.group_ledger`` holds the protocol they serve)."""

from __future__ import annotations

from dataclasses import replace

from cloudqueue.listener.workflows.group_ledger import Addition, GroupError, GroupStatus, Settled


def member_ids(first: int, count: int) -> list[str]:
    """Members are numbered in the order they join their group, from 0."""
    return [str(index) for index in range(first, first + count)]


def member_index(member_id: str, total: int) -> int | None:
    """The member's number when it belongs to a group of ``total`` members, else None."""
    if not member_id.isdigit() or len(member_id) > 12:
        return None
    index = int(member_id)
    return index if index < total else None


def unsettled_ids(total: int, settled: set[int], limit: int) -> list[str]:
    """The ids of up to ``limit`` members of ``0 .. total - 1`` not in ``settled``, lowest first."""
    unsettled = (str(index) for index in range(total) if index not in settled)
    return [member for member, _ in zip(unsettled, range(limit), strict=False)]


def check_count(count: int, what: str) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise GroupError(f"{what} must be at least 1 member, got {count!r}")
    return count


def counted(group: GroupStatus, outcome: Settled) -> GroupStatus:
    """The group with one more member settled as ``outcome``."""
    if outcome == "handled":
        return replace(group, handled=group.handled + 1)
    return replace(group, poisoned=group.poisoned + 1)


def passed_again(earlier: list[str], count: int, group_id: str, member_id: str) -> list[str]:
    """The ids a member's chain step was given before, when it asks for as many again."""
    if len(earlier) != count:
        raise GroupError(
            f"member {member_id} of group {group_id!r} was passed on as {len(earlier)} "
            f"items before and {count} now: a chain step must return the same on a redelivery"
        )
    return earlier


def added_again(earlier: Addition, count: int, group_id: str) -> Addition:
    """An addition made before, when its repeat asks for as many members again."""
    if len(earlier.member_ids) != count:
        raise GroupError(
            f"group {group_id!r}: an addition of {len(earlier.member_ids)} members was repeated "
            f"with {count}: a handler must add the same on a redelivery"
        )
    return earlier


def open_group(group: GroupStatus | None, group_id: str) -> GroupStatus:
    if group is None:
        raise GroupError(f"no group {group_id!r}")
    if group.done:
        raise GroupError(
            f"group {group_id!r} is complete: members are added before the adding member settles"
        )
    return group


__all__ = [
    "added_again",
    "check_count",
    "counted",
    "member_ids",
    "member_index",
    "open_group",
    "passed_again",
    "unsettled_ids",
]
