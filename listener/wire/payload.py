"""The wire format of cloudqueue's own messages: compressed items, batches and payload references.

A single item that fits in a message travels exactly as its codec encodes it (base64 of JSON by
default), so queues shared with Azure Functions see nothing new. Anything else is an *envelope*, a
JSON object whose only key is ``$cloudqueue``::

    {"$cloudqueue":{"v":1,"kind":"gzip","count":1,"inner":"base64","data":"H4sIAAAAAAAA..."}}
    {"$cloudqueue":{"v":1,"kind":"batch","count":120,"inner":"base64","data":"H4sIAAAAAAAA..."}}
    {"$cloudqueue":{"v":1,"kind":"blob","count":1,"inner":"base64","blob":"orders/5f0c...","bytes":1048731}}

* ``kind``: ``gzip`` is one item inline, ``batch`` several items inline, ``blob`` items kept in the
  payload store under the name ``blob`` (``bytes`` long, for operators).
* ``attempts`` (optional, 0 when absent): how many times these items were delivered before they
  were put in this message. The listener writes it when it re-publishes the failed items of a
  batch (see ``listener.consumer.processing``), so their poison decision counts every attempt.
  A listener that does not know the key ignores it and merely retries them longer.
* ``data`` (base64), or the stored payload, is gzip of the *frames*: for each item in order, its
  length as 4 bytes big-endian, then its bytes.
* ``inner`` says how each item's codec text became those bytes. ``base64``: every text was
  canonical base64 and its decoded bytes are stored (base64 inside gzip compresses about a third
  worse than what it encodes); ``text``: the UTF-8 of each text. Reading reverses it, so the codec
  gets back exactly the text it wrote.

The envelope is plain JSON even on base64 queues: ``{``, ``"`` and ``:`` are not base64
characters, so it can never be taken for a base64 item, and its data is not base64-encoded twice
(about 48 KiB of compressed data fit in a message instead of 36). On a plain-text queue an item
whose text is itself such an object is sent inside an envelope, so the key stays reserved without
limiting what items may be. An envelope of an unknown version is undecodable (it is poisoned and
can be requeued once the listener is upgraded).

A stored payload of zero bytes is a *tombstone*: the listener writes it over a payload once its
message was handled and deleted (``retire_payload``), instead of deleting it. gzip data is never
empty, so it cannot be mistaken for a payload. A second message naming the payload -- left by an
SDK retry of a put that had in fact succeeded -- then finds the tombstone and is dropped as a
duplicate of done work, while a payload that is simply gone still means ``payload_missing``.
Tombstones live in the store itself, so every worker process sees them; they are removed by the
same clean-up as orphaned payloads (anything older than the queue's time-to-live).

Reading is bounded (``listener.wire.limits``): the announced ``count`` is checked before the
data is inflated, inflating stops at the cap, splitting stops at the announced count, and JSON is
parsed only within the depth limit. A stored payload belongs to the queue its name starts with
(``<queue>/<32 hex digits>``, written by the publisher of that queue): a listener reads only its
own queue's payloads (or its partitions'), so a message naming another queue's payload is poisoned
as ``payload_foreign`` and that payload is left alone for its own message.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from listener.errors import DecodeError, LimitExceededError
from listener.stores.payload_store import PayloadStore, check_payload_owner, validate_payload_name
from listener.wire import bounded_json
from listener.wire.limits import DEFAULT_LIMITS, DecodingLimits, over_limit

ENVELOPE_KEY = "$cloudqueue"
VERSION = 1
TRACE_FIELDS = ("traceparent", "tracestate")

Kind = Literal["gzip", "batch", "blob"]
Inner = Literal["base64", "text"]

GZIP_LEVEL = 6
"""zlib's default: level 9 (gzip.compress's default) is ~6x slower for ~7% smaller output."""

_LENGTH_BYTES = 4
_RESERVED = re.compile(r'^\s*\{\s*"\$cloudqueue"\s*:')
_NOT_RESERVED = object()

TOMBSTONE = b""
"""What a handled message's payload is replaced with (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Packed:
    """Items' codec texts as one compressed byte string (gzip of their frames)."""

    inner: Inner
    count: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Framed:
    """Items' codec texts turned into frames (length + bytes), ready to be packed in any run."""

    inner: Inner
    frames: list[bytes]


@dataclass(frozen=True, slots=True)
class Envelope:
    """A parsed envelope: the items inline (``packed``) or a reference to a stored payload."""

    kind: Kind
    inner: Inner
    count: int
    packed: Packed | None = None
    payload_name: str | None = None
    attempts: int = 0
    carrier: dict[str, str] = field(default_factory=dict, compare=False)
    """The trace context text fields it carries, as written (``trace_context`` validates them)."""


@dataclass(frozen=True, slots=True)
class MessageContents:
    """What one queue message carries: its items' codec texts, and the payload to retire after.

    ``handled`` is True (and ``texts`` empty) when the payload is a tombstone: this message is a
    duplicate of one whose work is done.
    """

    texts: list[str]
    payload_name: str | None = None
    handled: bool = False
    attempts: int = 0
    """Deliveries of these items in earlier messages (the envelope's ``attempts``)."""


def pack(texts: Sequence[str]) -> Packed:
    """Compress the codec texts of one or more items into one byte string."""
    framed = frame(texts)
    return pack_frames(framed.inner, framed.frames)


def frame(texts: Sequence[str]) -> Framed:
    """The frames of the items, to pack several runs of them without converting each time."""
    inner, chunks = _item_bytes(texts)
    return Framed(inner, [len(chunk).to_bytes(_LENGTH_BYTES, "big") + chunk for chunk in chunks])


def pack_frames(inner: Inner, frames: Sequence[bytes]) -> Packed:
    """Compress a run of frames made by ``frame``."""
    # mtime=0: the same items always give the same bytes (reproducible messages and tests).
    data = gzip.compress(b"".join(frames), compresslevel=GZIP_LEVEL, mtime=0)
    return Packed(inner, len(frames), data)


def unpack(
    packed: Packed,
    *,
    max_bytes: int = DEFAULT_LIMITS.max_inflated_bytes_per_message,
    limit_name: str = "max_inflated_bytes_per_message",
) -> list[str]:
    """The codec texts that ``pack`` was given, in order; DecodeError if the data is damaged,
    LimitExceededError if it inflates past ``max_bytes`` (the setting ``limit_name``)."""
    chunks = _split_frames(_gunzip(packed.data, max_bytes, limit_name), packed.count)
    if packed.inner == "base64":
        return [base64.b64encode(chunk).decode("ascii") for chunk in chunks]
    try:
        return [chunk.decode("utf-8") for chunk in chunks]
    except UnicodeDecodeError as error:
        raise DecodeError(f"an item in the envelope is not UTF-8 text: {error}") from None


def inline_envelope(packed: Packed, *, attempts: int = 0) -> str:
    """The message text carrying packed items inline (kind ``gzip`` for one, ``batch`` for more),
    ``attempts`` earlier deliveries recorded when there were any."""
    kind: Kind = "gzip" if packed.count == 1 else "batch"
    data = base64.b64encode(packed.data).decode("ascii")
    tried = {"attempts": attempts} if attempts else {}
    return _dump({**_header(kind, packed), **tried, "data": data})


def blob_envelope(payload_name: str, packed: Packed) -> str:
    """The message text referring to packed items stored under ``payload_name``."""
    validate_payload_name(payload_name)
    return _dump({**_header("blob", packed), "blob": payload_name, "bytes": len(packed.data)})


def is_reserved(text: str) -> bool:
    """True when the text is a JSON object whose only key is ``$cloudqueue``: the listener would
    read it as an envelope, so a publisher must not send it bare. Text that starts like one but
    nests too deep to tell counts as one: wrapped, it still round-trips."""
    try:
        return _reserved_value(text, DEFAULT_LIMITS.max_json_depth) is not _NOT_RESERVED
    except LimitExceededError:
        return True


def parse_envelope(
    content: str, *, max_json_depth: int = DEFAULT_LIMITS.max_json_depth
) -> Envelope | None:
    """The envelope in a message's text; None for a plain item; DecodeError if it is malformed
    (LimitExceededError if it nests deeper than ``max_json_depth``)."""
    value = _reserved_value(content, max_json_depth)
    if value is _NOT_RESERVED:
        return None
    if not isinstance(value, dict):
        raise DecodeError(f"malformed cloudqueue envelope: {ENVELOPE_KEY} is not an object")
    if value.get("v") != VERSION:
        raise DecodeError(
            f"cloudqueue envelope version {value.get('v')!r} is not supported (this listener "
            f"reads version {VERSION}): upgrade the listener, then requeue"
        )
    try:
        return _envelope(value)
    except (KeyError, TypeError, ValueError) as error:
        raise DecodeError(f"malformed cloudqueue envelope: {error}") from None


def without_attempts(content: str) -> str:
    """The message text with its envelope's ``attempts`` removed, for a fresh start (requeue);
    any other text unchanged."""
    try:
        envelope = parse_envelope(content)
    except DecodeError:
        return content
    if envelope is None or not envelope.attempts:
        return content
    fields = dict(json.loads(content)[ENVELOPE_KEY])
    del fields["attempts"]
    return _dump(fields)


def open_message(
    content: str,
    store: PayloadStore | None,
    *,
    limits: DecodingLimits = DEFAULT_LIMITS,
    queue_name: str | None = None,
) -> MessageContents:
    """The item texts in a message, fetching a stored payload if it refers to one (see
    ``open_envelope``)."""
    envelope = parse_envelope(content, max_json_depth=limits.max_json_depth)
    return open_envelope(content, envelope, store, limits=limits, queue_name=queue_name)


def open_envelope(
    content: str,
    envelope: Envelope | None,
    store: PayloadStore | None,
    *,
    limits: DecodingLimits = DEFAULT_LIMITS,
    queue_name: str | None = None,
) -> MessageContents:
    """The item texts of a message whose envelope (None: a plain item) is already parsed.

    ``queue_name`` is the queue the message was read from: a stored payload written for another
    queue raises ForeignPayloadError before the store is asked. Raises DecodeError (malformed, or
    stored payload but no store), LimitExceededError (over ``limits``), PayloadNotFoundError (the
    payload is gone), or another StorageError from the store.
    """
    if envelope is None:
        return MessageContents([content])
    if envelope.count > limits.max_items_per_message:
        what = f"the message announces {envelope.count:,} items"
        raise over_limit(what, "max_items_per_message", limits.max_items_per_message)
    if envelope.packed is not None:
        texts = unpack(envelope.packed, max_bytes=limits.max_inflated_bytes_per_message)
        return MessageContents(texts, attempts=envelope.attempts)
    name = str(envelope.payload_name)
    if queue_name is not None:
        check_payload_owner(name, queue_name)
    if store is None:
        raise DecodeError(
            f"the message refers to stored payload {name!r}, but the listener has no payload "
            "store (pass payload_store=...)"
        )
    data = _fetch(store, name, limits.max_blob_payload_bytes)
    if data == TOMBSTONE:
        return MessageContents([], payload_name=name, handled=True)
    packed = Packed(envelope.inner, envelope.count, data)
    texts = unpack(
        packed, max_bytes=limits.max_blob_payload_bytes, limit_name="max_blob_payload_bytes"
    )
    return MessageContents(texts, payload_name=name, attempts=envelope.attempts)


def _fetch(store: PayloadStore, name: str, max_bytes: int) -> bytes:
    """The stored payload, read no further than one byte past ``max_bytes``."""
    data = store.get(name, max_bytes=max_bytes)
    if len(data) > max_bytes:  # a store that read it whole after all
        raise over_limit(f"stored payload {name!r} is larger", "max_blob_payload_bytes", max_bytes)
    return data


def retire_payload(store: PayloadStore, name: str) -> None:
    """Replace a handled message's payload with a tombstone (may raise StorageError)."""
    store.put(name, TOMBSTONE)


def _item_bytes(texts: Sequence[str]) -> tuple[Inner, list[bytes]]:
    decoded = [_canonical_base64(text) for text in texts]
    if all(chunk is not None for chunk in decoded):
        return "base64", [chunk for chunk in decoded if chunk is not None]
    return "text", [text.encode("utf-8") for text in texts]


def _canonical_base64(text: str) -> bytes | None:
    """The bytes a base64 text encodes, if encoding them again gives back the very same text."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


def _gunzip(data: bytes, max_bytes: int, limit_name: str) -> bytes:
    """The inflated data; inflating stops one byte past ``max_bytes``, so a bomb costs no more."""
    inflater = zlib.decompressobj(wbits=31)  # 31: expect a gzip header and trailer
    try:
        frames = inflater.decompress(data, max_bytes + 1)
    except zlib.error as error:
        raise DecodeError(f"the envelope's data is not valid gzip: {error}") from None
    if len(frames) > max_bytes:
        raise over_limit("the message's data inflates further", limit_name, max_bytes)
    if not inflater.eof:
        raise DecodeError("the envelope's gzip data is truncated")
    return frames


def _split_frames(frames: bytes, count: int) -> list[bytes]:
    """The items in the frames; stops as soon as there are more than the ``count`` announced
    (which is within the item limit), so a lying count costs no more than a true one."""
    chunks: list[bytes] = []
    offset = 0
    while offset < len(frames):
        if len(chunks) == count:
            raise DecodeError(f"the envelope announces {count} item(s) but holds more")
        start = offset + _LENGTH_BYTES
        end = start + int.from_bytes(frames[offset:start], "big")
        if end > len(frames):
            raise DecodeError("the envelope's data is truncated inside an item")
        chunks.append(frames[start:end])
        offset = end
    if len(chunks) != count:
        raise DecodeError(f"the envelope announces {count} item(s) but holds {len(chunks)}")
    return chunks


def _reserved_value(text: str, max_json_depth: int) -> Any:
    if not _RESERVED.match(text):
        return _NOT_RESERVED  # the cheap test: most messages are not JSON objects at all
    try:
        value = bounded_json.loads(text, max_json_depth)
    except LimitExceededError:
        raise
    except ValueError:
        return _NOT_RESERVED
    if isinstance(value, dict) and list(value) == [ENVELOPE_KEY]:
        return value[ENVELOPE_KEY]
    return _NOT_RESERVED


def _header(kind: Kind, packed: Packed) -> dict[str, Any]:
    return {"v": VERSION, "kind": kind, "count": packed.count, "inner": packed.inner}


def _dump(fields: dict[str, Any]) -> str:
    return json.dumps({ENVELOPE_KEY: fields}, separators=(",", ":"))


def _envelope(fields: dict[str, Any]) -> Envelope:
    kind, inner, count = fields["kind"], fields["inner"], fields["count"]
    if kind not in ("gzip", "batch", "blob") or inner not in ("base64", "text"):
        raise ValueError(f"unknown kind {kind!r} or inner encoding {inner!r}")
    if not _is_count(count) or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")
    attempts = fields.get("attempts", 0)
    if not _is_count(attempts) or attempts < 0:
        raise ValueError(f"attempts must be a non-negative integer, got {attempts!r}")
    carrier = {key: value for key in TRACE_FIELDS if isinstance(value := fields.get(key), str)}
    if kind == "blob":
        name = validate_payload_name(str(fields["blob"]))
        return Envelope(kind, inner, count, payload_name=name, attempts=attempts, carrier=carrier)
    data = base64.b64decode(str(fields["data"]), validate=True)
    packed = Packed(inner, count, data)
    return Envelope(kind, inner, count, packed=packed, attempts=attempts, carrier=carrier)


def _is_count(value: object) -> bool:
    """A whole number that is not a boolean (``True`` is an int in Python, but not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = [
    "ENVELOPE_KEY",
    "TOMBSTONE",
    "Envelope",
    "Framed",
    "MessageContents",
    "Packed",
    "blob_envelope",
    "frame",
    "inline_envelope",
    "is_reserved",
    "open_envelope",
    "open_message",
    "pack",
    "pack_frames",
    "parse_envelope",
    "retire_payload",
    "unpack",
    "without_attempts",
]
