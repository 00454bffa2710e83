"""The errors reference: cloudqueue's exception hierarchy and the reasons a message is poisoned."""

from __future__ import annotations

import inspect

from cloudqueue.listener import errors
from cloudqueue.listener.errors import CloudQueueError
from cloudqueue.listener.poison.reasons import POISON_REASONS
from docsite.cells import cell


def error_types() -> list[tuple[int, type[CloudQueueError]]]:
    """Every error type of ``cloudqueue.listener.errors`` with its depth below
    ``CloudQueueError``."""
    ordered: list[tuple[int, type[CloudQueueError]]] = []

    def walk(error: type[CloudQueueError], depth: int) -> None:
        ordered.append((depth, error))
        for child in error.__subclasses__():
            if child.__module__ == errors.__name__:
                walk(child, depth + 1)

    walk(CloudQueueError, 0)
    return ordered


def description(error: type[CloudQueueError]) -> str:
    """What the page says an error means: its docstring."""
    return inspect.getdoc(error) or ""


def render_errors() -> str:
    rows = ["| error | is a | meaning |", "|---|---|---|"]
    for depth, error in error_types():
        parent = error.__mro__[1].__name__
        indent = "&nbsp;&nbsp;&nbsp;" * depth
        rows.append(f"| {indent}`{error.__name__}` | `{parent}` | {cell(description(error))} |")
    return "\n".join(rows) + "\n"


def render_poison_reasons() -> str:
    rows = ["| reason | when |", "|---|---|"]
    rows.extend(f"| `{reason}` | {cell(meaning)} |" for reason, meaning in POISON_REASONS.items())
    return "\n".join(rows) + "\n"
