"""A message's key: the text that names the work it carries, carried in its envelope.

One notion serves four features: partition routing (one key, one partition), idempotent handling
(a key completed within the window is not handled again), per-key concurrency (no more than N of
a key at a time) and cancelling (a cancelled key's messages are deleted unhandled). A publisher
sets it (``Publisher(key=...)``, ``publish(item, key=...)``, ``cloudqueue enqueue --key FIELD``);
a worker without one may derive it from the item (``QueueWorker.key``).

A key is text of 1 to ``MAX_KEY_CHARS`` characters without control characters: it is written
into envelopes, SQLite rows and (hashed) blob names, and shown in logs.
"""

from __future__ import annotations

import re

MAX_KEY_CHARS = 256

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_key(key: object) -> str:
    """``key`` when it is a valid key; ValueError saying why not (never echoing a long key)."""
    if not isinstance(key, str):
        raise ValueError(f"a key must be text, got {type(key).__name__}")
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        raise ValueError(f"a key must be 1..{MAX_KEY_CHARS} characters, got {len(key)}")
    if _CONTROL.search(key):
        raise ValueError("a key must not contain control characters")
    return key


def key_text(value: object) -> str:
    """A key from a field's value: text as is, anything else as ``str(value)``; checked."""
    return check_key(value if isinstance(value, str) else str(value))


__all__ = ["MAX_KEY_CHARS", "check_key", "key_text"]
