"""What the queue's store remembers about a message key, and the rules that change it.

One record per queue and key (``cloudqueue.listener.wire.keys``) serves idempotent handling and
cancelling; marks of effect-once publishing are records of their own kind (``sent``)::

    done_until       completed (idempotency): another message of the key is a duplicate until then
    cancelled_until  cancelled: a message of the key is deleted unhandled until then
    handling_until   a message of the key (``handling_by``, its id) is being handled now;
                     a cancel then comes too late for it. Expires by itself if its holder dies.

Every change is one atomic read-decide-write on one record (``KeyLedger.change``): a transaction
on SQLite, a lock in memory, a conditional write (ETag) on Azure. The decisions are the pure
functions below, shared by the three stores. A record expires when all its times have passed;
the stores remove expired records in sweeps at most once per ``SWEEP_INTERVAL_S``, never by a
scan per message, and read an expired record as empty meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol, TypeVar

R = TypeVar("R")

RecordKind = Literal["key", "sent"]
"""``key``: a message key's record; ``sent``: an effect-once publish's mark."""

SWEEP_INTERVAL_S = 300.0
"""Expired records are removed at most this often per ledger (each sweep one indexed delete on
SQLite, one listing on Azure)."""

Begun = Literal["started", "cancelled", "duplicate", "busy"]
"""``begin``'s answer: handle it; delete it (cancelled, or a duplicate of completed work); or wait,
another message of the key is being handled (idempotency only)."""

Cancelled = Literal["cancelled", "too_late", "done"]
"""``cancel``'s answer: recorded before any message of the key started; a message of it is being
handled now (it finishes); or one was already completed (within the idempotency window)."""


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """What the ledger keeps per key."""

    done_until: datetime | None = None
    cancelled_until: datetime | None = None
    handling_until: datetime | None = None
    handling_by: str | None = None

    def to_fields(self) -> dict[str, str]:
        """As text fields (blob metadata), only those that are set."""
        fields = {
            name: moment.isoformat()
            for name, moment in (
                ("done_until", self.done_until),
                ("cancelled_until", self.cancelled_until),
                ("handling_until", self.handling_until),
            )
            if moment is not None
        }
        return fields if self.handling_by is None else {**fields, "handling_by": self.handling_by}

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> KeyRecord:
        """Parse ``to_fields``; a field absent or unreadable counts as unset."""
        return cls(
            done_until=moment(fields.get("done_until")),
            cancelled_until=moment(fields.get("cancelled_until")),
            handling_until=moment(fields.get("handling_until")),
            handling_by=fields.get("handling_by") or None,
        )

    def expires(self) -> datetime | None:
        """When every time in it has passed (None: nothing set)."""
        times = [t for t in (self.done_until, self.cancelled_until, self.handling_until) if t]
        return max(times) if times else None

    def live(self, now: datetime) -> KeyRecord:
        """The record as of ``now``: what has passed is unset."""
        if self is EMPTY:  # the usual record of a key: none (a hot path: no new object)
            return self
        return KeyRecord(
            done_until=_if_after(self.done_until, now),
            cancelled_until=_if_after(self.cancelled_until, now),
            handling_until=_if_after(self.handling_until, now),
            handling_by=self.handling_by if _if_after(self.handling_until, now) else None,
        )


EMPTY = KeyRecord()

Decide = Callable[[KeyRecord, datetime], tuple[KeyRecord | None, R]]
"""Given the live record and the store's time now: the record to write (None: leave it as it
is; ``EMPTY``: remove it) and the answer to return."""


class KeyLedger(Protocol):
    """Records per queue and key in the queue's own store
    (``cloudqueue.listener.stores.key_ledger``)."""

    def change(self, queue: str, kind: RecordKind, key: str, decide: Decide[R]) -> R:
        """Read the record (live, as of now), decide, write what was decided: atomically."""

    def record(self, queue: str, kind: RecordKind, key: str) -> KeyRecord:
        """The live record (``EMPTY`` when there is none)."""

    def counts_by_queue(self) -> dict[str, int]:
        """The billed storage calls it has made, per queue (the live cost meter adds them to the
        queue's own); an embedded store's ledger makes none."""

    def close(self) -> None:
        """Release connections."""


def begin(
    ledger: KeyLedger, queue: str, key: str, *, message_id: str, hold_s: float, dedupe: bool
) -> Begun:
    """Start handling a message of ``key`` unless it is cancelled, or (``dedupe``) completed or
    being handled by another message; marks it as being handled by ``message_id``."""

    def decide(record: KeyRecord, now: datetime) -> tuple[KeyRecord | None, Begun]:
        if record.cancelled_until is not None:
            return None, "cancelled"
        if dedupe and record.done_until is not None:
            return None, "duplicate"
        if dedupe and record.handling_by not in (None, message_id):
            return None, "busy"
        handling = now + timedelta(seconds=hold_s)
        started = KeyRecord(record.done_until, record.cancelled_until, handling, message_id)
        return started, "started"

    return ledger.change(queue, "key", key, decide)


def extend(ledger: KeyLedger, queue: str, key: str, *, message_id: str, hold_s: float) -> bool:
    """Push ``message_id``'s handling mark of ``key`` to ``hold_s`` from now, while its handler
    still runs; False when the mark is no longer its (it expired and another message took it)."""

    def decide(record: KeyRecord, now: datetime) -> tuple[KeyRecord | None, bool]:
        if record.handling_by != message_id:
            return None, False
        return replace(record, handling_until=now + timedelta(seconds=hold_s)), True

    return ledger.change(queue, "key", key, decide)


def finish(
    ledger: KeyLedger, queue: str, key: str, *, message_id: str, done_s: float | None
) -> bool:
    """End ``message_id``'s handling of ``key``: completed for ``done_s`` (None: not completed,
    or not remembered). True when the key was cancelled meanwhile: too late for this message."""

    def decide(record: KeyRecord, now: datetime) -> tuple[KeyRecord | None, bool]:
        mine = record.handling_by == message_id
        ended = KeyRecord(
            now + timedelta(seconds=done_s) if done_s else record.done_until,
            record.cancelled_until,
            None if mine else record.handling_until,
            None if mine else record.handling_by,
        )
        return (None if ended == record else ended), record.cancelled_until is not None

    return ledger.change(queue, "key", key, decide)


def cancel(ledger: KeyLedger, queue: str, key: str, *, hold_s: float) -> Cancelled:
    """Record ``key`` as cancelled for ``hold_s``; say whether that came too late for a message
    being handled now or already completed (the cancel is recorded all the same, for the
    messages of the key still queued)."""

    def decide(record: KeyRecord, now: datetime) -> tuple[KeyRecord | None, Cancelled]:
        cancelled = replace(record, cancelled_until=now + timedelta(seconds=hold_s))
        if record.handling_until is not None:
            return cancelled, "too_late"
        return cancelled, "done" if record.done_until is not None else "cancelled"

    return ledger.change(queue, "key", key, decide)


def was_sent(ledger: KeyLedger, queue: str, mark: str) -> bool:
    """True when an effect-once publish with this mark was put on ``queue`` within its window."""
    return ledger.record(queue, "sent", mark).done_until is not None


def mark_sent(ledger: KeyLedger, queue: str, mark: str, *, window_s: float) -> None:
    """Remember that the publish with this mark was put on ``queue``, for ``window_s``."""

    def decide(record: KeyRecord, now: datetime) -> tuple[KeyRecord | None, None]:
        return KeyRecord(done_until=now + timedelta(seconds=window_s)), None

    ledger.change(queue, "sent", mark, decide)


def moment(text: str | None) -> datetime | None:
    """A stored ISO time, timezone-aware; None when absent or unreadable."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _if_after(when: datetime | None, now: datetime) -> datetime | None:
    return when if when is not None and when > now else None


__all__ = [
    "EMPTY",
    "SWEEP_INTERVAL_S",
    "Begun",
    "Cancelled",
    "Decide",
    "KeyLedger",
    "KeyRecord",
    "RecordKind",
    "begin",
    "cancel",
    "extend",
    "finish",
    "mark_sent",
    "moment",
    "was_sent",
]
