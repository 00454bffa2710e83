"""Items packed as gzip of *frames*: for each item in order, its length as 4 bytes big-endian,
then its bytes (``cloudqueue.listener.wire.payload`` says where packed items travel).

``inner`` says how each item's codec text became those bytes. ``base64``: every text was
canonical base64 and its decoded bytes are stored (base64 inside gzip compresses about a third
worse than what it encodes); ``text``: the UTF-8 of each text. Reading reverses it, so the codec
gets back exactly the text it wrote. Inflating stops at a cap, and splitting at the announced
count, so a bomb or a lying count costs no more than the limits allow.
"""

from __future__ import annotations

import base64
import gzip
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cloudqueue.listener.errors import DecodeError
from cloudqueue.listener.wire.encodings import canonical_base64
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS, over_limit

Inner = Literal["base64", "text"]

GZIP_LEVEL = 6
"""zlib's default: level 9 (gzip.compress's default) is ~6x slower for ~7% smaller output."""

_LENGTH_BYTES = 4


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


def _item_bytes(texts: Sequence[str]) -> tuple[Inner, list[bytes]]:
    decoded = [canonical_base64(text) for text in texts]
    if all(chunk is not None for chunk in decoded):
        return "base64", [chunk for chunk in decoded if chunk is not None]
    return "text", [text.encode("utf-8") for text in texts]


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


__all__ = ["Framed", "Inner", "Packed", "frame", "pack", "pack_frames", "unpack"]
