"""Effect-once publishing: the same key and content put on a queue once within a window.

A handler that publishes and then fails is retried, and publishes again: without help, the next
queue gets the message twice. A ``Publisher`` with ``effect_once_s`` remembers, in the key ledger
of the queue's store (``cloudqueue.listener.stores.key_records``), a mark for each message it put --
a hash of the message's key and its items' text -- for that long, and skips a put whose mark is
there.

The mark is written right *after* the put, so nothing is ever lost: a crash in the instant
between the put and the mark leaves the message put and unmarked, and the retry puts it again.
That copy carries the same key, so a consumer with idempotent handling on (``[idempotency]``)
still handles it once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import structlog

from cloudqueue.listener.stores.key_records import KeyLedger, mark_sent, was_sent

log = structlog.get_logger(__name__)


class EffectOnce:
    """Marks of the messages one publisher put, in its queue's key ledger."""

    def __init__(self, ledger: KeyLedger, queue_name: str, window_s: float) -> None:
        if window_s <= 0:
            raise ValueError(f"effect_once_s must be > 0, got {window_s}")
        self.ledger = ledger
        self.queue_name = queue_name
        self.window_s = window_s
        self.skipped = 0

    def put_once(self, key: str | None, texts: Sequence[str], put: Callable[[], None]) -> int:
        """``put()`` the message of this key and these items' codec texts, then mark it -- unless
        its mark is there (put within the window). The messages put: 1, or 0 when skipped."""
        mark = self.mark(key, texts)
        if was_sent(self.ledger, self.queue_name, mark):
            self.skipped += 1
            log.info("publish_skipped", queue=self.queue_name, key=key, items=len(texts))
            return 0
        put()
        mark_sent(self.ledger, self.queue_name, mark, window_s=self.window_s)
        return 1

    @staticmethod
    def mark(key: str | None, texts: Sequence[str]) -> str:
        """The mark of a message: a hash of its key and its items' codec texts."""
        digest = hashlib.sha256((key or "").encode("utf-8") + b"\x00")
        for text in texts:
            digest.update(len(text).to_bytes(8, "big") + text.encode("utf-8"))
        return digest.hexdigest()

    def __repr__(self) -> str:
        return f"EffectOnce(queue={self.queue_name!r}, window_s={self.window_s})"


__all__ = ["EffectOnce"]
