"""How a message says it is a member of a group: two fields of its envelope, ``group`` (the
group id) and ``member`` (its member id, its number in the group).

Listeners read envelope fields by name and ignore those they do not know
(``cloudqueue.listener.wire.envelope``), so a member is an ordinary message to any listener, and a
message without the fields (every message sent before groups existed) is simply no member.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cloudqueue.listener.consumer.current import current_message
from cloudqueue.listener.errors import DecodeError, MessageTooLargeError
from cloudqueue.listener.queue_limits import MAX_MESSAGE_BYTES
from cloudqueue.listener.wire.envelope import Envelope, envelope_text, parse_envelope
from cloudqueue.listener.wire.packing import message_bytes, single_message
from cloudqueue.listener.workflows.group_ledger import GroupError

GROUP_FIELD = "group"
MEMBER_FIELD = "member"
MAX_ID_CHARS = 64
_GROUP_ID = re.compile(rf"[A-Za-z0-9_.:-]{{1,{MAX_ID_CHARS}}}")


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


def member_message(text: str, membership: Membership, *, key: str | None = None) -> str:
    """The message text of one member: its item's codec text in an envelope with the fields
    (and its message ``key``, if it has one)."""
    message = single_message(text, enveloped=True, key=key)
    envelope = None if not isinstance(message, str) else parse_envelope(message)
    if envelope is None:
        raise MessageTooLargeError(
            f"a group member of {message_bytes(text)} bytes does not fit a message even "
            "compressed: members kept in a payload store are not supported yet"
        )
    fields = {
        **envelope.fields,
        GROUP_FIELD: membership.group_id,
        MEMBER_FIELD: membership.member_id,
    }
    content = envelope_text(fields)
    if message_bytes(content) > MAX_MESSAGE_BYTES:
        raise MessageTooLargeError("a group member does not fit a message with its membership")
    return content


def current_membership() -> Membership | None:
    """The membership of the message being handled (None outside a delivery, or no member)."""
    message = current_message()
    if message is None:
        return None
    try:
        return membership_of(parse_envelope(message.content))
    except DecodeError:
        return None


def check_group_id(group_id: str) -> str:
    """A group id a caller chose, refused unless it can travel in every member and name a row
    in every store: 1-64 letters, digits, ``-``, ``_``, ``.`` or ``:`` (Azure's Table service
    refuses ``/``, ``\\``, ``#``, ``?`` and control characters in keys)."""
    if not isinstance(group_id, str) or _GROUP_ID.fullmatch(group_id) is None:
        raise GroupError(
            f"group_id must be 1-{MAX_ID_CHARS} letters, digits, '-', '_', '.' or ':', "
            f"got {group_id!r:.80}"
        )
    return group_id


def _is_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS


__all__ = [
    "GROUP_FIELD",
    "MEMBER_FIELD",
    "Membership",
    "check_group_id",
    "current_membership",
    "member_message",
    "membership_of",
]
