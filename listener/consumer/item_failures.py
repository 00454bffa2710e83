"""Which items of a message failed, and how to say so in one line of a log or poison record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cloudqueue.listener.errors import BatchFailed, PermanentFailure, RetryLater

MAX_ERROR_CHARS = 2000
"""The longest error text kept (a poison record holds two of them beside the content)."""

MAX_LABEL_CHARS = 80
"""How much of an item's repr names it in an error text."""


@dataclass(frozen=True, slots=True)
class ItemFailure:
    """One item that at least one observer failed on."""

    position: int
    """Its place in the message, from 0."""
    text: str
    """Its codec text, to re-publish it."""
    label: str
    """A short repr, to name it for a person."""
    failures: Sequence[Exception]


def is_permanent(failed: Sequence[ItemFailure]) -> bool:
    """True when a handler declared any of these items hopeless (``PermanentFailure``)."""
    return any(isinstance(error, PermanentFailure) for item in failed for error in item.failures)


def judged(failure: BaseException) -> BaseException:
    """What a failure stands for: a ``BatchFailed`` raised from an exception, that exception."""
    if isinstance(failure, BatchFailed) and failure.__cause__ is not None:
        return failure.__cause__
    return failure


def retry_later_s(failed: Sequence[ItemFailure]) -> int | None:
    """The whole seconds a handler asked these items to wait (``RetryLater``, also as the cause
    of a ``BatchFailed``): the longest, when several asked; None when none did."""
    asked = [
        error.visibility_s
        for item in failed
        for failure in item.failures
        if isinstance(error := judged(failure), RetryLater)
    ]
    return max(asked, default=None)


def describe_errors(failures: Sequence[Exception]) -> str:
    """One line naming each observer's failure (type and message)."""
    return "; ".join(f"{type(failure).__name__}: {failure}" for failure in failures)[
        :MAX_ERROR_CHARS
    ]


def describe_items(failed: Sequence[ItemFailure], *, count: int, batched: bool) -> str:
    """The failures of a message's items: bare errors for a lone item, else each failed item's
    position and label before its errors, e.g. ``item 2 of 3 (Order(order_id=2)): ValueError: x``.
    """
    if not batched:
        return describe_errors([error for item in failed for error in item.failures])
    return "; ".join(
        f"item {item.position + 1} of {count} ({item.label}): {describe_errors(item.failures)}"
        for item in failed
    )[:MAX_ERROR_CHARS]


def label(item: object) -> str:
    """A short repr of an item, safe to put in one line."""
    text = repr(item).replace("\n", " ")
    return text if len(text) <= MAX_LABEL_CHARS else f"{text[: MAX_LABEL_CHARS - 3]}..."


__all__ = [
    "ItemFailure",
    "describe_errors",
    "describe_items",
    "is_permanent",
    "judged",
    "label",
    "retry_later_s",
]
