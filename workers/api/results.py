"""A worker's results, as its class declares them: ``keep_results`` and ``results_ttl_s``.

Both are class attributes beside the handler, not settings: whether a handler's return value is
kept, and for how long a caller may still fetch it, is part of the worker's contract with the code
that sends to it (its handles' ``result``), as the item type is -- not a knob of how it runs.

A batch handler (``handle_batch``) is refused with ``keep_results``: its one return value belongs
to no single message, and per-item values would give ``handle_batch`` a second return contract
beside ``BatchFailed``.
"""

from __future__ import annotations

import typing
from typing import Any

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.workflows.result_stores import check_ttl

DEFAULT_RESULTS_TTL_S = 24 * 3600.0
"""A day: long enough for a caller that waits, short enough that the store does not fill."""


def check_results(cls: Any, name: str) -> None:
    """Refuse a ``keep_results`` that is no bool, a time to live that is no positive finite
    number of seconds, and results of a batch handler (ConfigurationError naming the worker)."""
    keep = cls.keep_results
    if not isinstance(keep, bool):
        raise ConfigurationError(f"{name!r}: keep_results must be True or False, got {keep!r}")
    try:
        check_ttl(cls.results_ttl_s)
    except ValueError as error:
        raise ConfigurationError(f"{name!r}: results_ttl_s: {error}") from None
    if keep and cls.batches():
        raise ConfigurationError(
            f"{name!r}: keep_results needs handle(self, item): a batch handler's one return "
            "value belongs to no single message"
        )


def result_type(cls: Any) -> object:
    """What the worker's ``handle`` is annotated to return (its results decode as it when it is
    a pydantic model); None when unannotated or unreadable."""
    try:
        hints = typing.get_type_hints(cls.handle)
    except Exception:  # a forward reference that cannot be resolved: plain JSON then
        return None
    return hints.get("return")


__all__ = ["DEFAULT_RESULTS_TTL_S", "check_results", "result_type"]
