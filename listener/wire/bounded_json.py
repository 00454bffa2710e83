"""JSON from messages, parsed only when its nesting is known to be within a limit.

Python's ``json`` recurses once per level of nesting: 20,000 brackets raise ``RecursionError``,
which no ``except ValueError`` catches and which can end the thread that parsed them. So the depth
of a message's JSON is measured first, without recursion and at C speed for the common case, and
text nested deeper than the limit is refused with ``LimitExceededError``. The number of values a
message's items hold is bounded the same way, before they are built (``check_values``).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from listener.wire.limits import DEFAULT_LIMITS, over_limit

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
"""A JSON string literal (brackets inside one do not nest); unrolled, so it scans at C speed."""
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def depth(text: str) -> int:
    """The deepest nesting of objects and arrays in JSON text (an estimate for broken JSON:
    an unterminated string's brackets count)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def check_depth(text: str, max_depth: int = DEFAULT_LIMITS.max_json_depth) -> None:
    """Raise LimitExceededError when the text nests deeper than ``max_depth``."""
    if text.count("[") + text.count("{") <= max_depth:
        return  # the common case: too few brackets to nest that deep at all
    found = depth(text)
    if found > max_depth:
        raise over_limit(f"JSON nested {found} levels deep", "max_json_depth", max_depth)


def check_values(texts: list[str], max_values: int) -> None:
    """Raise LimitExceededError when the texts hold more JSON values than ``max_values``
    together, counted as the ``,``, ``:``, ``[`` and ``{`` in them (an upper bound: those inside
    strings count too). Text no longer than the limit cannot exceed it, so most messages cost a
    length sum and no scan."""
    if sum(map(len, texts)) <= max_values:
        return
    found = sum(
        text.count(",") + text.count(":") + text.count("[") + text.count("{") for text in texts
    )
    if found > max_values:
        what = f"the message holds about {found:,} JSON values"
        raise over_limit(what, "max_json_values_per_message", max_values)


def loads(text: str, max_depth: int = DEFAULT_LIMITS.max_json_depth) -> Any:
    """``json.loads`` of text nested at most ``max_depth`` deep; LimitExceededError (a
    DecodeError) when deeper, ValueError when it is not JSON."""
    check_depth(text, max_depth)
    return json.loads(text)


__all__ = ["check_depth", "check_values", "depth", "loads"]
