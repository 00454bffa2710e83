"""How a message's text may carry an item: base64 or as it stands, and how to tell them apart.

Producers not written here disagree: Azure Functions and ``TextBase64EncodePolicy`` write base64,
the Python and JavaScript SDKs' defaults write text as it is. The ``auto`` encoding tells them
apart message by message:

* JSON items (models, dicts, lists, numbers): content that is JSON of the item type as it stands is
  taken as it stands (``{``, ``[`` and ``"`` are not base64 characters, so no base64 text of a JSON
  object is ever mistaken for one); otherwise the content must be strict base64 of such JSON.
* ``str`` items: content that is canonical base64 (encoding its bytes again gives the same text)
  of printable UTF-8 text is decoded; any other content is the text itself. Short words can be
  canonical base64 by chance, so a text queue is safer with an explicit encoding.
* ``bytes`` items: canonical base64 is decoded; any other content is its UTF-8 bytes.
"""

from __future__ import annotations

import base64
import binascii

from cloudqueue.listener.errors import DecodeError

PREVIEW_CHARS = 40
"""How much of an undecodable message its poison reason quotes: enough to recognise it."""

_ADVICE = {
    "base64": "set listener.encoding = 'auto' (or 'plain') if producers write plain text",
    "plain": "set listener.encoding = 'auto' (or 'base64') if producers write base64",
    "auto": "check what the producer writes: this worker's item type does not match it",
}


def strict_base64(content: str) -> bytes:
    """The bytes a base64 text encodes; DecodeError unless it is strictly base64."""
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as error:
        raise DecodeError(f"content is not valid base64: {error}") from None


def canonical_base64(content: str) -> bytes | None:
    """The bytes, if the content is exactly the base64 text those bytes encode to; else None."""
    try:
        raw = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == content else None


def base64_text(content: str) -> str | None:
    """The text the content encodes, if it is canonical base64 of printable UTF-8; else None."""
    raw = canonical_base64(content)
    if raw is None or not content:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = text.replace("\n", "").replace("\r", "").replace("\t", "").isprintable()
    return text if printable else None


def preview(content: str) -> str:
    """The first characters of a message, quoted (control characters escaped, as ``repr``
    does), to recognise it in a poison reason."""
    if len(content) <= PREVIEW_CHARS:
        return repr(content)
    return repr(content[:PREVIEW_CHARS]) + f"... ({len(content)} characters)"


def explain(why: str, content: str, encoding: str, item_type: str, *, decoded: bool = False) -> str:
    """A poison reason: what was tried and why it failed, how the content starts, what to change.

    ``decoded``: ``content`` is the text the message carried in base64, which is what its
    producer enqueued and so what the reader recognises."""
    starts = "decoded content starts" if decoded else "content starts"
    return (
        f"cannot read {with_article(item_type)} with listener.encoding = '{encoding}': {why}; "
        f"{starts} {preview(content)}; {_ADVICE[encoding]}"
    )


_CONSONANT_SOUNDS = ("eu", "one", "uni", "usa", "use", "usu", "uti", "uu")
"""Words that start with a vowel letter but a consonant sound: "a User", "a Unit", "a UUID"."""


def with_article(noun: str) -> str:
    """The noun with "a" or "an" before it, by its first sound as English spells it most often:
    "an Invoice", "an Order", "a User", "a dict"."""
    lower = noun.lower()
    vowel_sound = lower[:1] in ("a", "e", "i", "o", "u") and not lower.startswith(_CONSONANT_SOUNDS)
    return f"{'an' if vowel_sound else 'a'} {noun}"


__all__ = [
    "base64_text",
    "canonical_base64",
    "explain",
    "preview",
    "strict_base64",
    "with_article",
]
