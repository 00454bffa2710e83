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
  batch (see ``cloudqueue.listener.consumer.processing``), so their poison decision counts every
  attempt. A listener that does not know the key ignores it and merely retries them longer.
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

Reading is bounded (``cloudqueue.listener.wire.limits``): the announced ``count`` is checked before
the data is inflated, inflating stops at the cap, splitting stops at the announced count, and JSON
is parsed only within the depth limit. A stored payload belongs to the queue its name starts with
(``<queue>/<32 hex digits>``, written by the publisher of that queue): a listener reads only its
own queue's payloads (or its partitions'), so a message naming another queue's payload is poisoned
as ``payload_foreign`` and that payload is left alone for its own message.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudqueue.listener.errors import DecodeError
from cloudqueue.listener.stores.payload_store import PayloadStore, check_payload_owner
from cloudqueue.listener.wire.envelope import Envelope, parse_envelope
from cloudqueue.listener.wire.frames import Packed, unpack
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS, DecodingLimits, over_limit

TOMBSTONE = b""
"""What a handled message's payload is replaced with (see the module docstring)."""


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


__all__ = ["TOMBSTONE", "MessageContents", "open_envelope", "open_message", "retire_payload"]
