"""What a running handler writes into its own message: its progress and its checkpoint.

Both are fields of the message's envelope (``cloudqueue.listener.wire.envelope``), written by
rewriting the message's text with the same update-message call that renews its visibility:

* ``progress``: ``{"fraction": 0.4, "detail": "3 of 8 files"}``, the last report;
* ``checkpoint``: the handler's saved state as JSON *text* (a string field, so however the state
  nests, the envelope's own parse stays within the depth limit; it is parsed only when a handler
  asks for it);
* ``checkpoint_blob``: instead of ``checkpoint``, the name of a stored payload holding that text,
  when it does not fit in the message (``cloudqueue.listener.stores.payload_store``).

A plain message (an item travelling as its codec's text) becomes a one-item envelope the first
time it is rewritten; every other field (key, attempts, trace context, membership) is kept.
Listeners ignore fields they do not know, so an older listener handles such a message from its
start.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from cloudqueue.listener.errors import CloudQueueError, MessageTooLargeError
from cloudqueue.listener.wire import bounded_json
from cloudqueue.listener.wire.envelope import Envelope, envelope_text, parse_envelope
from cloudqueue.listener.wire.packing import MAX_ENVELOPE_BYTES, message_bytes, single_message

PROGRESS_FIELD = "progress"
CHECKPOINT_FIELD = "checkpoint"
CHECKPOINT_BLOB_FIELD = "checkpoint_blob"

MAX_CHECKPOINT_BYTES = 256 * 1024
"""The largest checkpoint (its JSON text, UTF-8): a checkpoint is a small state to resume from
(step done, cursor), not the work's output. Beyond what fits in the message it goes to the
payload store."""

MAX_DETAIL_CHARS = 200
"""A progress detail is one short line (``3 of 8 files``)."""


class CheckpointError(CloudQueueError, ValueError):
    """A checkpoint that cannot be saved: not a JSON value, over the limit, or with nowhere to
    go (too large for the message and no payload store)."""


def checkpoint_text(state: object) -> str:
    """The JSON text of a checkpoint; CheckpointError if ``state`` is no JSON value or the text
    is over ``MAX_CHECKPOINT_BYTES``."""
    try:
        text = json.dumps(state, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as error:
        raise CheckpointError(
            f"a checkpoint must be a JSON value (dict, list, str, number, bool or None): {error}"
        ) from None
    size = message_bytes(text)
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(
            f"a checkpoint of {size:,} bytes is over the limit of {MAX_CHECKPOINT_BYTES:,}: "
            "keep the state to resume from, and the work's output elsewhere"
        )
    return text


def parse_checkpoint(text: str) -> Any:
    """The state a checkpoint's text holds (bounded by the JSON depth limit); ValueError if the
    text is none (a message written by someone else)."""
    if message_bytes(text) > MAX_CHECKPOINT_BYTES:
        raise ValueError(f"checkpoint text over {MAX_CHECKPOINT_BYTES:,} bytes")
    return bounded_json.loads(text)


def progress_note(fraction: float, detail: str) -> dict[str, Any]:
    """The ``progress`` field of a report; ValueError for a fraction outside 0..1 or a detail
    that is not one short line."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ValueError(f"progress fraction must be a number from 0 to 1, got {fraction!r}")
    if not math.isfinite(fraction) or not 0 <= fraction <= 1:
        raise ValueError(f"progress fraction must be from 0 to 1, got {fraction!r}")
    if not isinstance(detail, str) or len(detail) > MAX_DETAIL_CHARS or "\n" in detail:
        raise ValueError(f"progress detail must be one line of at most {MAX_DETAIL_CHARS} chars")
    return {"fraction": float(fraction), "detail": detail}


def rewritten(content: str, changes: Mapping[str, object | None]) -> str:
    """The message text ``content`` with its envelope's fields set to ``changes`` (None removes
    one). MessageTooLargeError when the result does not fit in a message; DecodeError when the
    content's envelope is malformed (a message that would not have been delivered)."""
    envelope = _envelope_of(content)
    fields = {name: value for name, value in envelope.fields.items() if name not in changes}
    fields.update({name: value for name, value in changes.items() if value is not None})
    text = envelope_text(fields)
    if message_bytes(text) > MAX_ENVELOPE_BYTES:
        raise MessageTooLargeError(
            f"the message with its handler's notes would be {message_bytes(text):,} bytes, "
            f"over the {MAX_ENVELOPE_BYTES:,} an envelope may take"
        )
    return text


def _envelope_of(content: str) -> Envelope:
    envelope = parse_envelope(content)
    if envelope is not None:
        return envelope
    single = single_message(content, enveloped=True)
    wrapped = parse_envelope(single) if isinstance(single, str) else None
    if wrapped is None:
        raise MessageTooLargeError(
            "the message's item does not fit in an envelope, so it cannot carry its handler's "
            "progress or checkpoint"
        )
    return wrapped


__all__ = [
    "CHECKPOINT_BLOB_FIELD",
    "CHECKPOINT_FIELD",
    "MAX_CHECKPOINT_BYTES",
    "MAX_DETAIL_CHARS",
    "PROGRESS_FIELD",
    "CheckpointError",
    "checkpoint_text",
    "parse_checkpoint",
    "progress_note",
    "rewritten",
]
