"""Making group members: a member's message text with its membership fields, the membership of
the message being handled, and the check of a chosen group id. Reading the fields is
``cloudqueue.listener.wire.membership``.
"""

from __future__ import annotations

import re

from cloudqueue.listener.consumer.current import current_message
from cloudqueue.listener.errors import DecodeError, MessageTooLargeError
from cloudqueue.listener.queue_limits import MAX_MESSAGE_BYTES
from cloudqueue.listener.wire.envelope import envelope_text, parse_envelope
from cloudqueue.listener.wire.membership import (
    GROUP_FIELD,
    MAX_ID_CHARS,
    MEMBER_FIELD,
    Membership,
    membership_of,
)
from cloudqueue.listener.wire.packing import message_bytes, single_message
from cloudqueue.listener.workflows.group_ledger import GroupError

_GROUP_ID = re.compile(rf"[A-Za-z0-9_.:-]{{1,{MAX_ID_CHARS}}}")


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


__all__ = ["check_group_id", "current_membership", "member_message"]
