"""The demo's story on a terminal: one short line for each event a person watching cares about.

A worker logs a dozen kinds of events; someone watching the demo wants five of them: work found,
the pool growing, a message poisoned, threads stopping, back to one poller. ``Narrator`` is the
structlog renderer that tells those as sentences and drops the rest (per-message events, thread
bookkeeping). Warnings and errors are never dropped: they render in full, as in production.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import structlog
from structlog.typing import EventDict, WrappedLogger

Story = Callable[[EventDict], str]

# Plain ANSI colours: the line goes through the same stream as every other log line.
GREEN, YELLOW, RED, RESET = "\x1b[32m", "\x1b[33m", "\x1b[31m", "\x1b[0m"

ERROR_PREVIEW_CHARS = 70


def _enqueueing(event: EventDict) -> str:
    return (
        f"Enqueueing {event['invoices']:,} invoices and {event['malformed']} malformed message "
        f"on {event['queue']!r}, where one idle poller waits."
    )


def _scaled_up(event: EventDict) -> str:
    return (
        f"{GREEN}▲{RESET} {event['queue']}: ~{event['depth']:,} waiting, the pool grows to "
        f"{event['target']} threads (rule {event['rule']})."
    )


def _scaled_down(event: EventDict) -> str:
    threads = event["target"]
    left = f"{threads} thread{'s' * (threads != 1)} left"
    return f"{YELLOW}▼{RESET} {event['queue']}: queue empty, {left}."


def _poisoned(event: EventDict) -> str:
    error = str(event.get("error", ""))
    if len(error) > ERROR_PREVIEW_CHARS:
        error = error[:ERROR_PREVIEW_CHARS] + "…"
    return (
        f"{RED}✗{RESET} {event['queue']}: message {str(event['message_id'])[:8]} moved to "
        f"{event['poison_queue']} ({event['reason']}: {error})"
    )


STORIES: dict[str, Story] = {
    "demo_enqueueing": _enqueueing,
    "scaled_up": _scaled_up,
    "scaled_down": _scaled_down,
    "message_poisoned": _poisoned,
}


class Narrator:
    """A structlog renderer: known events as short sentences, problems in full, no chatter."""

    def __init__(self) -> None:
        self._in_full = structlog.dev.ConsoleRenderer(colors=True)

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> Any:
        story = STORIES.get(str(event_dict.get("event")))
        if story is not None:
            return story(event_dict)
        if logging.getLevelName(str(event_dict.get("level", "info")).upper()) >= logging.WARNING:
            return self._in_full(logger, method_name, event_dict)
        raise structlog.DropEvent


__all__ = ["STORIES", "Narrator"]
