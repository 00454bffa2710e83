"""Turning items into queue text and back.

An item is a pydantic model, ``str``, ``bytes``, ``dict`` or anything else pydantic can validate.
Text and bytes travel as they are; everything else travels as JSON. By default the text is then
base64-encoded, as Azure Functions and WebJobs producers and consumers expect, so cloudqueue can
share queues with them; plain text is selectable for queues only cloudqueue touches.
"""

from __future__ import annotations

import base64
import binascii
from typing import Generic, Protocol, TypeVar, cast

import pydantic

from listener.errors import ConfigurationError, DecodeError

T = TypeVar("T")


class Codec(Protocol[T]):
    """Converts between items and the text content of queue messages."""

    def encode(self, item: T) -> str:
        """The message content for an item."""

    def decode(self, content: str) -> T:
        """The item in a message's content; raises DecodeError when it is not one."""


class MessageCodec(Generic[T]):
    """The standard codec: raw text/bytes or JSON, wrapped in base64 unless ``base64=False``."""

    def __init__(self, item_type: type[T], *, base64: bool = True) -> None:
        if item_type is bytes and not base64:
            raise ConfigurationError(
                "bytes items need the base64 encoding: plain text cannot carry them"
            )
        self.item_type = item_type
        self.base64 = base64
        self._adapter: pydantic.TypeAdapter[T] = pydantic.TypeAdapter(item_type)

    def encode(self, item: T) -> str:
        payload = self._to_bytes(item)
        if self.base64:
            return base64.b64encode(payload).decode("ascii")
        return payload.decode("utf-8")

    def decode(self, content: str) -> T:
        payload = self._unwrap(content)
        if self.item_type is bytes:
            return cast(T, payload)
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DecodeError(f"content is not UTF-8 text: {error}") from error
        if self.item_type is str:
            return cast(T, text)
        try:
            return self._adapter.validate_json(text)
        except pydantic.ValidationError as error:
            raise DecodeError(_describe(error)) from error

    def _to_bytes(self, item: T) -> bytes:
        if isinstance(item, bytes):
            return item
        if isinstance(item, str):
            return item.encode("utf-8")
        return self._adapter.dump_json(item)

    def _unwrap(self, content: str) -> bytes:
        if not self.base64:
            return content.encode("utf-8")
        try:
            return base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as error:
            raise DecodeError(f"content is not valid base64: {error}") from error

    def __repr__(self) -> str:
        encoding = "base64" if self.base64 else "plain"
        return f"MessageCodec({getattr(self.item_type, '__name__', self.item_type)}, {encoding})"


def _describe(error: pydantic.ValidationError) -> str:
    """A one-line summary of a validation error, without echoing the whole payload."""
    problems: list[str] = []
    for detail in error.errors(include_url=False, include_input=False):
        location = ".".join(str(part) for part in detail["loc"]) or "item"
        problems.append(f"{location}: {detail['msg']}")
    return f"{error.error_count()} validation error(s): " + "; ".join(problems[:5])


def codec_for(item_type: type[T], *, base64: bool = True) -> Codec[T]:
    """The standard codec for an item type."""
    return MessageCodec(item_type, base64=base64)


__all__: list[str] = ["Codec", "MessageCodec", "codec_for"]
