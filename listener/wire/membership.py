"""How a message says it is a member of a group: two fields of its envelope, ``group`` (the
group id) and ``member`` (its member id, its number in the group).

Listeners read envelope fields by name and ignore those they do not know
(``cloudqueue.listener.wire.envelope``), so a member is an ordinary message to any listener, and a
message without the fields (every message sent before groups existed) is simply no member. This
is the reading, for every floor that meets a message (the consumer's progress reports too);
making members and validating ids is ``cloudqueue.listener.workflows.membership``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudqueue.listener.wire.envelope import Envelope

GROUP_FIELD = "group"
MEMBER_FIELD = "member"
MAX_ID_CHARS = 64


@dataclass(frozen=True, slots=True)
class Membership:
    """A message's place in a group."""

    group_id: str
    member_id: str


def membership_of(envelope: Envelope | None) -> Membership | None:
    """The membership an envelope carries; None when it carries none (or a malformed one)."""
    if envelope is None:
        return None
    group, member = envelope.fields.get(GROUP_FIELD), envelope.fields.get(MEMBER_FIELD)
    if _is_id(group) and _is_id(member):
        return Membership(str(group), str(member))
    return None


def _is_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS


__all__ = ["GROUP_FIELD", "MAX_ID_CHARS", "MEMBER_FIELD", "Membership", "membership_of"]
