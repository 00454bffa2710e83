"""Cancelling the queued messages of keys: ``Publisher.cancel`` and ``cloudqueue cancel``.

Each key's record in the queue's key ledger (``cloudqueue.listener.stores.key_records.cancel``) says
that messages of it fetched while the cancel holds are deleted unhandled; a listener checks it
before each keyed message (``cloudqueue.listener.middleware.keyed``).
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from cloudqueue.listener.stores.key_records import Cancelled, KeyLedger, cancel
from cloudqueue.listener.wire.keys import check_key

log = structlog.get_logger(__name__)

CANCEL_HOLD_S = 7 * 24 * 3600
"""How long a cancel holds by default: a message's default time-to-live."""


def cancel_keys(
    ledger: KeyLedger, queue: str, keys: Sequence[str], *, hold_s: float
) -> dict[str, Cancelled]:
    """Cancel each key for ``hold_s`` (all checked first, so a bad one records none), logged."""
    if hold_s <= 0:
        raise ValueError(f"hold_s must be > 0, got {hold_s}")
    checked = [check_key(key) for key in keys]
    answers = {key: cancel(ledger, queue, key, hold_s=hold_s) for key in checked}
    for key, answer in answers.items():
        log.info("key_cancelled", queue=queue, key=key, result=answer)
    return answers


__all__ = ["CANCEL_HOLD_S", "cancel_keys"]
