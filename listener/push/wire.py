"""A trigger's wire form, parsed defensively: whoever can publish on the channel may send anything.

A trigger is one small, flat JSON object: ``{"account": ..., "queue_name": ..., "payload_size":
..., "message_count": ...}``. Before anything is decoded its size is capped (``MAX_TRIGGER_BYTES``),
its bytes must be strict UTF-8 and its nesting shallow (``MAX_NESTING``: ``json``
recurses, and 20,000 brackets would raise ``RecursionError``); the numbers must be whole, finite
and in range, the names printable text of bounded length. Anything else raises
``MalformedTriggerError`` with a short reason that never quotes the input.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from cloudqueue.listener.errors import MalformedTriggerError

MAX_TRIGGER_BYTES = 8192
"""A real trigger is well under 1 KiB; an embedded store's account (its file path) is the
longest part."""
MAX_NESTING = 2
"""Brackets open at once: the trigger object itself, and room for one structured extra field."""
MAX_NAME_CHARS = 4096
MAX_COUNT = 2**53
"""Counts and sizes above this are no real batch (and no longer exact as JSON numbers)."""

_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def parse_trigger(raw: object) -> dict[str, Any]:
    """The fields of one trigger, checked: account, queue_name, payload_size, message_count."""
    if not isinstance(raw, bytes | str):
        _reject("not text")
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > MAX_TRIGGER_BYTES:
        _reject(f"larger than {MAX_TRIGGER_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        _reject("not UTF-8")
    if _nesting(data) > MAX_NESTING:
        _reject(f"nested deeper than {MAX_NESTING}")
    try:
        fields = json.loads(text, parse_constant=_no_constant)
    except ValueError:  # JSONDecodeError, and ints too long to convert
        _reject("not JSON")
    if not isinstance(fields, dict):
        _reject("not a JSON object")
    return {
        "account": _name(fields, "account"),
        "queue_name": _name(fields, "queue_name"),
        "payload_size": _count(fields, "payload_size", default=0),
        "message_count": _count(fields, "message_count", default=1),
    }


def _nesting(data: bytes) -> int:
    """How deep brackets nest, strings aside (a bracket inside a name does not count)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b"", data)):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _name(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str) or not value:
        _reject(f"{key} is not a non-empty string")
    if len(value) > MAX_NAME_CHARS or not value.isprintable():
        # isprintable is False for control characters and for lone surrogates ("\ud800").
        _reject(f"{key} is too long or not printable")
    return value


def _count(fields: dict[str, Any], key: str, *, default: int) -> int:
    value = fields.get(key, default)
    if type(value) is not int or not 0 <= value <= MAX_COUNT:  # bool is an int: not a count
        _reject(f"{key} is not a whole number in 0..2**53")
    return value


def _no_constant(name: str) -> NoReturn:
    _reject(f"{name} is not a number")


def _reject(reason: str) -> NoReturn:
    raise MalformedTriggerError(reason)
