"""A handler's return value as it is kept (JSON text of bounded size), and read back.

A result is what the handler returned: a pydantic model, or any value JSON can hold (numbers,
strings, lists, dicts, None; dates and models inside them as pydantic writes them). Anything else
-- an object JSON cannot hold, NaN or an infinity -- is refused with ``ResultError`` naming its
type, as is a value whose JSON is over ``MAX_RESULT_BYTES``: the worker poisons its message with
that reason (a redelivery would return the same value).
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

MAX_RESULT_BYTES = 32 * 1024
"""The largest result kept, as UTF-8 JSON. At most 32 Ki characters, it fits one string property
of an Azure table entity (64 KiB of UTF-16), so every store keeps it in one row."""


class ResultError(ValueError):
    """A handler's return value cannot be kept as a result; ``reason`` is the poison reason."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def encode_result(value: object) -> str:
    """The JSON text a result is kept as; ``ResultError`` when it cannot be kept."""
    try:
        plain = to_jsonable_python(value)
        text = json.dumps(plain, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (PydanticSerializationError, ValueError, TypeError):
        _refuse(
            f"a {type(value).__name__} is not a JSON value (return a model or plain data)",
            "result_not_json",
        )
    size = len(text.encode("utf-8"))
    if size > MAX_RESULT_BYTES:
        _refuse(
            f"{size} bytes of JSON is over the {MAX_RESULT_BYTES}-byte limit for a result",
            "result_too_large",
        )
    return text


def decode_result(text: str, as_type: object = None) -> Any:
    """A kept result: an instance of ``as_type`` when that is a pydantic model, else the JSON
    value (dicts, lists, strings, numbers, None)."""
    if isinstance(as_type, type) and issubclass(as_type, BaseModel):
        return as_type.model_validate_json(text)
    return json.loads(text)


def _refuse(detail: str, reason: str) -> NoReturn:
    raise ResultError(f"the handler's result cannot be kept: {detail}", reason)


__all__ = ["MAX_RESULT_BYTES", "ResultError", "decode_result", "encode_result"]
