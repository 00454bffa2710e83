"""Delays beyond 7 days on the wire: the envelope's ``due`` and ``hops`` fields.

Azure hides a message for at most 7 days. A message delayed longer travels as an envelope whose
``due`` field says when it may be handled -- an ISO 8601 UTC time to the second, for people to
read: ``{"$cloudqueue":{"v":1,"kind":"gzip",...,"due":"2026-02-01T09:00:00Z","hops":2,"data":...}}``
-- and whose ``hops`` counts how often a listener took it before then and hid it again
(``cloudqueue.listener.consumer.hops``). A plain item is wrapped in a one-item envelope to carry the
field, so only cloudqueue listeners read a message delayed beyond 7 days (to Azure Functions it is
an envelope, as with ``trace_envelope``). A listener that predates the field ignores it: it handles
the message when it first becomes visible, 7 days after the put.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cloudqueue.listener.errors import DecodeError, LimitExceededError
from cloudqueue.listener.wire.envelope import Envelope, envelope_text, parse_envelope

DUE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def due_time(now: datetime, delay_s: int) -> datetime:
    """``now`` plus the delay, rounded up to the whole second the field holds: never early."""
    return _whole_second(now + timedelta(seconds=delay_s))


def with_due(content: str, due: datetime) -> str:
    """An envelope's text with ``due`` set, rounded up to the second (every other field kept);
    ValueError for plain text, which must go into an envelope first
    (``single_message(..., enveloped=True)``)."""
    envelope = parse_envelope(content)
    if envelope is None:
        raise ValueError("a due time travels in an envelope: wrap the item first")
    return envelope_text({**envelope.fields, "due": _whole_second(due).strftime(DUE_FORMAT)})


def next_hop(envelope: Envelope) -> str:
    """The text of the message hidden again for its next hop: ``hops`` one higher."""
    return envelope_text({**envelope.fields, "hops": envelope.hops + 1})


def due_of(content: str) -> datetime | None:
    """When a message's text says it is due; None when it says nothing or cannot be read."""
    try:
        envelope = parse_envelope(content)
    except (DecodeError, LimitExceededError):
        return None
    return None if envelope is None else envelope.due


def _whole_second(moment: datetime) -> datetime:
    utc = moment.astimezone(UTC)
    return utc.replace(microsecond=0) + timedelta(seconds=1 if utc.microsecond else 0)


__all__ = ["DUE_FORMAT", "due_of", "due_time", "next_hop", "with_due"]
