"""Turning items into queue text and back.

An item is a pydantic model, ``str``, ``bytes``, ``dict`` or anything else pydantic can validate.
Text and bytes travel as they are; everything else travels as JSON. Published text is then
base64-encoded by default, as Azure Functions and WebJobs consumers expect; ``plain`` publishes the
text as it is, for consumers using an SDK's defaults.

Reading, the ``encoding`` says what the content may be (see ``cloudqueue.listener.wire.encodings``):
``base64`` and ``plain`` accept only that form; ``auto`` (the default) reads what producers not
written here put in a queue, plain or base64, message by message. JSON nested deeper than
``max_json_depth`` is refused before it is parsed (``LimitExceededError``).
"""

from __future__ import annotations

import base64
from typing import Generic, Literal, Protocol, TypeVar, cast

import pydantic
import pydantic_core
import structlog

from cloudqueue.listener.errors import ConfigurationError, DecodeError, LimitExceededError
from cloudqueue.listener.wire import bounded_json, encodings
from cloudqueue.listener.wire.cloud_events import CloudEventAdapter, is_cloud_event_type
from cloudqueue.listener.wire.limits import DEFAULT_LIMITS

T = TypeVar("T")

Encoding = Literal["auto", "base64", "plain"]
ENCODINGS: tuple[Encoding, ...] = ("auto", "base64", "plain")

log = structlog.get_logger(__name__)


class Codec(Protocol[T]):
    """Converts between items and the text content of queue messages."""

    def encode(self, item: T) -> str:
        """The message content for an item."""

    def decode(self, content: str) -> T:
        """The item in a message's content; raises DecodeError when it is not one."""


class MessageCodec(Generic[T]):
    """The standard codec: raw text/bytes or JSON, read and written in the given ``encoding``.

    ``base64=True/False`` is the older spelling of ``encoding="base64"/"plain"``, still accepted.
    """

    def __init__(
        self,
        item_type: type[T],
        *,
        encoding: Encoding = "auto",
        base64: bool | None = None,
        max_json_depth: int = DEFAULT_LIMITS.max_json_depth,
    ) -> None:
        if base64 is not None:
            encoding = "base64" if base64 else "plain"
        if encoding not in ENCODINGS:
            raise ConfigurationError(
                f"unknown encoding {encoding!r}: use one of {', '.join(ENCODINGS)}"
            )
        if item_type is bytes and encoding == "plain":
            raise ConfigurationError(
                "bytes items need the base64 or auto encoding: plain text cannot carry them"
            )
        self.item_type = item_type
        self.encoding: Encoding = encoding
        self.max_json_depth = max_json_depth
        self._adapter = _adapter_for(item_type)

    @property
    def base64(self) -> bool:
        """Whether published text is base64 (every encoding but ``plain``)."""
        return self.encoding != "plain"

    @property
    def ambiguous(self) -> bool:
        """True when ``auto`` must guess: a text or bytes item may itself look like base64."""
        return self.encoding == "auto" and self.item_type in (str, bytes)

    def validated(self, item: object) -> T:
        """``item`` as an item of this codec's type, checked before it is sent: a dict made
        into the model, a value of another type refused with pydantic's ValidationError naming
        the field. A model instance is taken as it is (``encode`` refuses one that is invalid)."""
        if isinstance(self._adapter, pydantic.TypeAdapter):
            return cast(T, self._adapter.validate_python(item))
        return cast(T, item)  # a CloudEvent: its adapter checks it as it writes it

    def encode(self, item: T) -> str:
        payload = self._to_bytes(item)
        if self.base64:
            return base64.b64encode(payload).decode("ascii")
        return payload.decode("utf-8")

    def decode(self, content: str) -> T:
        if self.item_type is bytes:
            return cast(T, self._decode_bytes(content))
        if self.item_type is str:
            return cast(T, self._decode_text(content))
        if self.encoding == "auto":
            return self._decode_json_auto(content)
        return self._validate(self._text(self._unwrap(content), content), content)

    def _decode_bytes(self, content: str) -> bytes:
        if self.encoding == "auto":
            raw = encodings.canonical_base64(content)
            return content.encode("utf-8") if raw is None else raw
        return self._unwrap(content)

    def _decode_text(self, content: str) -> str:
        if self.encoding == "auto":
            text = encodings.base64_text(content)
            return content if text is None else text
        return self._text(self._unwrap(content), content)

    def _decode_json_auto(self, content: str) -> T:
        """JSON as it stands if it is an item; else strict base64 of JSON that is one."""
        if content[:1] not in _JSON_STARTS:
            # Not JSON as it stands (a failed parse costs ~6 µs): base64 is the only reading.
            # Should that fail too, the full path below explains both attempts.
            try:
                return self._parse(encodings.strict_base64(content).decode("utf-8"))
            except LimitExceededError:
                raise
            except (DecodeError, UnicodeDecodeError):
                pass
        try:
            return self._parse(content)
        except LimitExceededError:
            raise
        except DecodeError as error:
            as_is = error
        try:
            inner = encodings.strict_base64(content)
        except DecodeError as error:
            tried = _tried(("as JSON", as_is), ("as base64", error))
            raise self._undecodable(content, tried) from None
        try:
            text = inner.decode("utf-8")
        except UnicodeDecodeError as error:
            why = f"as JSON: {as_is}; as base64 of bytes that are not UTF-8 text: {error}"
            raise self._undecodable(content, why) from None
        try:
            return self._parse(text)
        except LimitExceededError:
            raise
        except DecodeError as error:
            tried = _tried(("as JSON", as_is), ("as base64 of JSON", error))
            raise self._undecodable(content, tried, decoded=text) from None

    def _validate(self, text: str, content: str) -> T:
        try:
            return self._parse(text)
        except LimitExceededError:
            raise
        except DecodeError as error:
            raise self._undecodable(content, str(error), decoded=text) from None

    def _parse(self, text: str) -> T:
        bounded_json.check_depth(text, self.max_json_depth)
        bounded_json.charge_values(text)
        try:
            return self._adapter.validate_json(text)
        except pydantic.ValidationError as error:
            if any(detail["type"] == "json_invalid" for detail in error.errors()):
                raise DecodeError(_describe(error)) from None
            raise _NotTheItemError(_describe(error)) from None

    def _text(self, payload: bytes, content: str) -> str:
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self._undecodable(content, f"content is not UTF-8 text: {error}") from None

    def _unwrap(self, content: str) -> bytes:
        if self.encoding == "plain":
            return content.encode("utf-8")
        try:
            return encodings.strict_base64(content)
        except DecodeError as error:
            raise self._undecodable(content, str(error)) from None

    def _undecodable(self, content: str, why: str, *, decoded: str | None = None) -> DecodeError:
        """The error for content that is no item; ``decoded`` is the text the content carried
        (base64-decoded), which the reason quotes instead of the base64."""
        text = content if decoded is None else decoded
        return DecodeError(
            encodings.explain(
                why, text, self.encoding, self._type_name(), decoded=decoded is not None
            )
        )

    def _to_bytes(self, item: T) -> bytes:
        if isinstance(item, bytes):
            return item
        if isinstance(item, str):
            return item.encode("utf-8")
        if not isinstance(self._adapter, pydantic.TypeAdapter):
            return self._adapter.dump_json(item)
        try:
            return self._adapter.dump_json(item, warnings="error")
        except pydantic_core.PydanticSerializationError:
            # A model built without validation (model_construct) or changed after: validating
            # what it holds names the field, rather than sending what no worker can decode.
            self._adapter.validate_python(self._adapter.dump_python(item, warnings=False))
            raise

    def _type_name(self) -> str:
        return getattr(self.item_type, "__name__", str(self.item_type))

    def __repr__(self) -> str:
        return f"MessageCodec({self._type_name()}, {self.encoding})"


_JSON_STARTS = frozenset(' \t\n\r{["-0123456789tfnNI')
"""First characters of any text pydantic may parse as JSON: whitespace, an object, array,
string, number, true/false/null, or NaN/Infinity (which pydantic accepts for floats). Base64 of a
JSON object starts with ``e``, of an array with ``W``."""


class _NotTheItemError(DecodeError):
    """The text is JSON, but not the item type: the reason a person needs first."""


def _tried(*attempts: tuple[str, DecodeError]) -> str:
    """Each reading tried and why it failed, the ones that found JSON first: when the text is
    JSON, that the item type's field is missing matters, not that its base64 is no JSON."""
    ordered = sorted(attempts, key=lambda attempt: not isinstance(attempt[1], _NotTheItemError))
    return "; ".join(f"{how}: {error}" for how, error in ordered)


class _ItemAdapter(Protocol[T]):
    """What the codec needs of ``pydantic.TypeAdapter``: JSON in, item out, and back."""

    def validate_json(self, text: str) -> T: ...

    def dump_json(self, item: T) -> bytes: ...


def _adapter_for(item_type: type[T]) -> _ItemAdapter[T]:
    """pydantic's adapter, or ours for types pydantic cannot validate (CloudEvent)."""
    if is_cloud_event_type(item_type):
        return cast(_ItemAdapter[T], CloudEventAdapter())
    return pydantic.TypeAdapter(item_type)


def _describe(error: pydantic.ValidationError) -> str:
    """A one-line summary of a validation error, without echoing the whole payload."""
    problems: list[str] = []
    for detail in error.errors(include_url=False, include_input=False):
        location = ".".join(str(part) for part in detail["loc"]) or "item"
        problems.append(f"{location}: {detail['msg']}")
    return f"{error.error_count()} validation error(s): " + "; ".join(problems[:5])


def codec_for(item_type: type[T], *, encoding: Encoding = "auto") -> Codec[T]:
    """The standard codec for an item type."""
    return MessageCodec(item_type, encoding=encoding)


def reading_codec(
    item_type: type[T], encoding: Encoding, *, max_json_depth: int = DEFAULT_LIMITS.max_json_depth
) -> MessageCodec[T]:
    """The codec a worker reads its queue with; warns once when ``auto`` has to guess."""
    codec = MessageCodec(item_type, encoding=encoding, max_json_depth=max_json_depth)
    if codec.ambiguous:
        log.warning(
            "encoding_ambiguous",
            item_type=codec._type_name(),
            rule="text that is canonical base64 of printable UTF-8 is decoded; other text is "
            "taken as it stands",
            advice="set listener.encoding = 'base64' or 'plain' to say which producers write",
        )
    return codec


__all__: list[str] = [
    "ENCODINGS",
    "Codec",
    "Encoding",
    "MessageCodec",
    "codec_for",
    "reading_codec",
]
