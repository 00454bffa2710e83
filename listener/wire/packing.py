"""Which items go into which message: pure functions of the items' codec texts, no storage.

A queue message holds at most 64 KiB (``MAX_MESSAGE_BYTES``, UTF-8 bytes as stored). A plain item
may use all of it, as it always could. An envelope stops ``POISON_HEADROOM_BYTES`` short, so that
if it is ever poisoned, the poison record (its content plus reason, worker and two errors of up to
2,000 characters each) still fits in one message and keeps those details.

Messages stay within the listener's default decoding limits (``cloudqueue.listener.wire.limits``): a
batch holds at most ``max_items_per_message`` items and inflates to at most
``max_inflated_bytes_per_message``, and a single item that would inflate past that goes to the
payload store rather than inline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from cloudqueue.listener.stores.storage import MAX_MESSAGE_BYTES
from cloudqueue.listener.wire.envelope import inline_envelope, is_reserved
from cloudqueue.listener.wire.frames import Framed, Packed, frame, pack, pack_frames
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS

POISON_HEADROOM_BYTES = 6 * 1024
MAX_ENVELOPE_BYTES = MAX_MESSAGE_BYTES - POISON_HEADROOM_BYTES
MAX_BATCH_ITEMS = DEFAULT_LIMITS.max_items_per_message
MAX_INLINE_BYTES = DEFAULT_LIMITS.max_inflated_bytes_per_message
"""The most an inline message's frames may take, inflated (a listener's default limit)."""


@dataclass(frozen=True, slots=True)
class PlannedMessage:
    """Items that travel together in one batch envelope (``content``), or one item that travels
    on its own (``content`` None: ``single_message`` decides how)."""

    texts: list[str]
    content: str | None


def message_bytes(text: str) -> int:
    """The size a message's content counts for against the limit: its UTF-8 bytes."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def single_message(
    text: str,
    *,
    max_envelope_bytes: int = MAX_ENVELOPE_BYTES,
    max_bytes: int = MAX_MESSAGE_BYTES,
    enveloped: bool = False,
    key: str | None = None,
) -> str | Packed:
    """The message for one item: its own text when that fits (as Azure Functions expects), else a
    gzip envelope when that fits, else the packed item, to be kept in the payload store.
    ``enveloped``: never its own text, for an item whose envelope carries more (a due time); an
    item with a ``key`` always travels in an envelope, which carries the key."""
    plain = not enveloped and key is None
    if plain and message_bytes(text) <= max_bytes and not is_reserved(text):
        return text
    packed = pack([text])
    if len(text) > MAX_INLINE_BYTES:  # characters: never more than its UTF-8 bytes
        return packed  # however well it compresses, a listener would refuse it inline
    envelope = inline_envelope(packed, key=key)
    return envelope if message_bytes(envelope) <= max_envelope_bytes else packed


def plan_batches(
    texts: Sequence[str],
    *,
    max_envelope_bytes: int = MAX_ENVELOPE_BYTES,
    max_bytes: int = MAX_MESSAGE_BYTES,
    key: str | None = None,
) -> list[PlannedMessage]:
    """Pack items, in order, into as few messages as fit: each message takes the longest run of
    the next items whose batch envelope stays within ``max_envelope_bytes``. Every envelope
    carries ``key`` (the items all have it).

    An item larger than a message, or one that fits in no batch with its neighbour, travels alone.
    """
    planned: list[PlannedMessage] = []
    run: list[str] = []
    for text in texts:
        if message_bytes(text) > max_bytes:
            # Not worth compressing together with others to find out: it travels alone.
            planned += _batches(run, max_envelope_bytes, key)
            planned.append(PlannedMessage([text], None))
            run = []
        else:
            run.append(text)
    return planned + _batches(run, max_envelope_bytes, key)


def _batches(texts: Sequence[str], limit: int, key: str | None) -> list[PlannedMessage]:
    framed = frame(texts)  # once: base64-decoding every text for every probe would dominate
    planned: list[PlannedMessage] = []
    start, hint = 0, 2
    while start < len(texts):
        end, content = _longest_batch(framed, start, limit, hint, key)
        planned.append(PlannedMessage(list(texts[start:end]), content))
        start, hint = end, max(2, end - start)  # the next message likely holds about as many
    return planned


def _longest_batch(
    framed: Framed, start: int, limit: int, hint: int, key: str | None
) -> tuple[int, str | None]:
    """The end of the longest run from ``start`` (at least one item) that fits in one batch
    envelope, and that envelope (None for a run of one: it travels as a single item).

    A search on the run's length keeping ``fits < hi`` bracketed: each probe compresses a run, and
    compressed size grows (almost) linearly with it, so the next probe is interpolated from the
    last one's size -- a few probes per message instead of one per item. When interpolation does
    not halve the bracket, the next probe bisects, so the search is never slower than bisection.
    """
    count = _run_end(framed, start)
    fits, fits_content, hi = start + 1, None, count + 1  # a run of one always "fits": it goes alone
    guess, bisect = start + hint, False
    while hi - fits > 1:
        probe = (fits + hi) // 2 if bisect else min(max(guess, fits + 1), hi - 1)
        width = hi - fits
        content = inline_envelope(pack_frames(framed.inner, framed.frames[start:probe]), key=key)
        size = message_bytes(content)
        if size <= limit:
            fits, fits_content = probe, content
        else:
            hi = probe
        guess = start + (probe - start) * limit // size
        bisect = hi <= count and hi - fits > width // 2
    return fits, fits_content


def _run_end(framed: Framed, start: int) -> int:
    """The end of the longest run from ``start`` within the listener's default limits on items
    and inflated bytes, however well it compresses (at least one item)."""
    end = min(len(framed.frames), start + MAX_BATCH_ITEMS)
    sizes = accumulate(len(chunk) for chunk in framed.frames[start:end])
    within = sum(1 for total in sizes if total <= MAX_INLINE_BYTES)  # sizes only grow
    return start + max(1, within)


__all__ = [
    "MAX_ENVELOPE_BYTES",
    "POISON_HEADROOM_BYTES",
    "PlannedMessage",
    "message_bytes",
    "plan_batches",
    "single_message",
]
