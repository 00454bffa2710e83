"""JSON from messages, parsed only when its nesting is known to be within a limit.

Python's ``json`` recurses once per level of nesting: 20,000 brackets raise ``RecursionError``,
which no ``except ValueError`` catches and which can end the thread that parsed them. So the depth
of a message's JSON is measured first, without recursion and at C speed for the common case, and
text nested deeper than the limit is refused with ``LimitExceededError``. The number of values a
message's items hold is bounded the same way, before each is built: the listener decodes a large
message's items within ``values_limited``, and the codec charges each item's JSON text there
(``charge_values``), after any base64 is undone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from itertools import accumulate
from typing import Any

from cloudqueue.listener.wire.limits import DEFAULT_LIMITS, over_limit

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
"""A JSON string literal (brackets inside one do not nest); unrolled, so it scans at C speed."""
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}

_budget: ContextVar[list[int] | None] = ContextVar("cloudqueue_json_values", default=None)
"""The values left to the message being decoded on this thread, and its limit."""


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


def values_in(text: str) -> int:
    """JSON values in the text, counted as its ``,``, ``:``, ``[`` and ``{`` (an upper bound:
    those inside strings count too)."""
    return text.count(",") + text.count(":") + text.count("[") + text.count("{")


@contextmanager
def values_limited(max_values: int) -> Iterator[None]:
    """Within: the JSON texts parsed on this thread (``charge_values``) may hold ``max_values``
    values together, or LimitExceededError is raised before the one that would exceed them."""
    token = _budget.set([max_values, max_values])
    try:
        yield
    finally:
        _budget.reset(token)


def charge_values(text: str) -> None:
    """Count the values of JSON text about to be parsed against the budget ``values_limited``
    set, if any (nothing outside one)."""
    budget = _budget.get()
    if budget is None:
        return
    budget[0] -= values_in(text)
    if budget[0] < 0:
        limit = budget[1]
        what = f"the message holds more than {limit:,} JSON values"
        raise over_limit(what, "max_json_values_per_message", limit)


def loads(text: str, max_depth: int = DEFAULT_LIMITS.max_json_depth) -> Any:
    """``json.loads`` of text nested at most ``max_depth`` deep; LimitExceededError (a
    DecodeError) when deeper, ValueError when it is not JSON."""
    check_depth(text, max_depth)
    return json.loads(text)


__all__ = ["charge_values", "check_depth", "depth", "loads", "values_in", "values_limited"]
