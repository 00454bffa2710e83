"""Handler tracebacks for people: the handler's own frames, logged once per distinct error.

A handler runs beneath reactivex's observer wrappers, the async runner's event loop and
cloudqueue's fan-out; a raw traceback is mostly their frames. The one-line account of a failure
(type, message, what happens next) is logged by ``listener.handling``; this module adds the
traceback at debug level, trimmed to the frames that are not the framework's, and only the first
time an error is raised at a given place, so a poison message retried five times or a bug hit by
every message does not repeat it. The text goes under the ``exception`` key, which structlog's
console renderer prints as a block and the JSON renderer keeps as one string.
"""

from __future__ import annotations

import threading
import traceback
from collections import OrderedDict
from types import TracebackType

import structlog

log = structlog.get_logger(__name__)

FRAMEWORK_MODULES = ("reactivex", "asyncio", "concurrent.futures")
"""Packages whose frames never help to find a handler's bug."""

OWN_MODULES = ("listener.subscribers", "workers.async_handler")
"""cloudqueue's modules between the dequeue thread and the handler."""

REMEMBERED_PLACES = 1_000
"""Distinct errors remembered per listener (oldest forgotten first, then logged again)."""


def handler_traceback(failure: BaseException) -> str:
    """The failure's traceback without framework frames (the exception line included)."""
    return "".join(
        traceback.format_exception(type(failure), failure, _user_frames(failure.__traceback__))
    )


class TracebackLog:
    """Logs a failure's trimmed traceback at debug level the first time its place is seen."""

    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, failure: BaseException) -> None:
        if self._first_time(_place(failure)):
            log.debug(
                "handler_traceback",
                error=f"{type(failure).__name__}: {failure}",
                exception=handler_traceback(failure),
            )

    def _first_time(self, place: tuple[str, str, int]) -> bool:
        with self._lock:
            if place in self._seen:
                return False
            self._seen[place] = None
            while len(self._seen) > REMEMBERED_PLACES:
                self._seen.popitem(last=False)
            return True


def _place(failure: BaseException) -> tuple[str, str, int]:
    """The exception type and where it was raised: one bug, whatever its message says."""
    last = failure.__traceback__
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    if last is None:
        return type(failure).__qualname__, "", 0
    return type(failure).__qualname__, last.tb_frame.f_code.co_filename, last.tb_lineno


def _user_frames(frames: TracebackType | None) -> TracebackType | None:
    """The chain of traceback entries whose code is not the framework's, in order."""
    kept = [entry for entry in _entries(frames) if not _is_framework(entry)]
    chained: TracebackType | None = None
    for entry in reversed(kept):
        chained = TracebackType(chained, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return chained


def _entries(frames: TracebackType | None) -> list[TracebackType]:
    entries: list[TracebackType] = []
    while frames is not None:
        entries.append(frames)
        frames = frames.tb_next
    return entries


def _is_framework(entry: TracebackType) -> bool:
    module = str(entry.tb_frame.f_globals.get("__name__", ""))
    return module in OWN_MODULES or any(
        module == name or module.startswith(f"{name}.") for name in FRAMEWORK_MODULES
    )


__all__ = ["TracebackLog", "handler_traceback"]
