"""Handler failures for people: the handler's own frames, logged once per distinct error.

A handler runs beneath reactivex's observer wrappers, the async runner's event loop and
cloudqueue's fan-out; a raw traceback is mostly their frames. The one-line account of each failure
(type, message, what happens next) is logged by ``cloudqueue.listener.consumer.processing``; this
module
adds the traceback, trimmed to the frames that are not the framework's:

* at **warning**, the first time an error is raised at a given place (its type and the line that
  raised it), as ``handler_traceback``, so a bug hit by every message, or a message retried five
  times, shows its traceback once;
* after that, a ``handler_error_repeated`` line without traceback at the 10th, 100th, 1000th...
  time, so a flood of one error is summarised, not repeated;
* at **error**, when a message is poisoned because its handler kept failing, the last failure's
  traceback as ``poisoned_handler_traceback`` (instead of, not as well as, ``handler_traceback``:
  a failure given up at its first delivery prints its traceback once).

Both come from the ``FailureLogs`` middleware, which every listener has first in its list: it
reads each settled message's failures (``MessageContext.failures``) and outcome.

A ``PermanentFailure`` or a ``RetryLater`` is a handler's deliberate verdict, not a bug: its
traceback stays at debug.
The text goes under the ``exception`` key, which structlog's console renderer prints as a block
and the JSON renderer keeps as one string. ``FailureMemory`` is the one bounded memory of failures
(places here, each message's first error in ``cloudqueue.listener.consumer.processing``).
"""

from __future__ import annotations

import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

import structlog

from cloudqueue.listener.consumer.item_failures import judged
from cloudqueue.listener.consumer.middleware import MessageContext, Middleware
from cloudqueue.listener.errors import PermanentFailure, RetryLater

K = TypeVar("K")
V = TypeVar("V")

log = structlog.get_logger(__name__)

FRAMEWORK_MODULES = ("reactivex", "asyncio", "concurrent.futures")
"""Packages whose frames never help to find a handler's bug."""

OWN_MODULES = (
    "cloudqueue.listener.consumer.subscribers",
    "cloudqueue.listener.consumer.coroutines",
    "cloudqueue.workers.host.async_handler",
    "cloudqueue.workers.recorders",
)
"""cloudqueue's modules between the dequeue thread and the handler (``recorders``: the wrapper
``run_until_drained`` puts around a worker's handler, so a test's log reads as production's)."""

VERDICTS = (PermanentFailure, RetryLater)
"""What a handler raises on purpose, to say what becomes of its message: no bug to trace."""

REMEMBERED_PLACES = 1_000
"""Distinct errors remembered per listener (oldest forgotten first, then logged again)."""

SUMMARY_EVERY_POWER_OF = 10
"""A repeated error is counted in the log at its 10th, 100th, 1000th... occurrence."""

Place = tuple[str, str, int]
"""An error's type, file and line: one bug, whatever its message says."""


def handler_traceback(failure: BaseException) -> str:
    """The failure's traceback without framework frames (the exception line included)."""
    return "".join(
        traceback.format_exception(type(failure), failure, _user_frames(failure.__traceback__))
    )


class FailureMemory(Generic[K, V]):
    """A thread-safe map keeping the ``capacity`` most recently added keys (oldest dropped)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def change(self, key: K, new_value: Callable[[V | None], V]) -> V:
        """Set the key to ``new_value(current value or None)`` and return what was set."""
        with self._lock:
            value = self._values[key] = new_value(self._values.get(key))
            while len(self._values) > self.capacity:
                self._values.popitem(last=False)
            return value

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._values.get(key)

    def forget(self, key: K) -> None:
        if not self._values:  # asked once per message: no lock while nothing is remembered
            return
        with self._lock:
            self._values.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)


class TracebackLog:
    """Logs a failure's trimmed traceback the first time its place is seen, then counts repeats."""

    def __init__(self) -> None:
        self._times_seen: FailureMemory[Place, int] = FailureMemory(REMEMBERED_PLACES)

    def record(self, failure: BaseException, *, poisoning: bool = False) -> None:
        """Count the failure's place; ``poisoning``: its traceback is about to be logged at error
        (``poisoned``), so a first sighting is not logged a second time at warning."""
        place = _place(failure)
        times = self._times_seen.change(place, lambda seen: (seen or 0) + 1)
        error = f"{type(failure).__name__}: {failure}"
        if times == 1 and poisoning:
            return
        if times == 1:
            level = log.debug if isinstance(judged(failure), VERDICTS) else log.warning
            level("handler_traceback", error=error, exception=handler_traceback(failure))
        elif _is_power_of(times, SUMMARY_EVERY_POWER_OF):
            log.warning("handler_error_repeated", error=error, raised_at=_where(place), times=times)


def poisoned(failure: BaseException) -> None:
    """Log the traceback of the failure that sent a message to the poison queue, at error."""
    if isinstance(judged(failure), VERDICTS):
        return  # the handler's verdict, already one warning line with the reason
    log.error(
        "poisoned_handler_traceback",
        error=f"{type(failure).__name__}: {failure}",
        exception=handler_traceback(failure),
    )


class FailureLogs(Middleware):
    """Logs handler failures for people: each distinct one's traceback once, repeats counted,
    and the last failure's traceback at error when its message is poisoned."""

    def __init__(self) -> None:
        self._tracebacks = TracebackLog()

    def after_settle(self, context: MessageContext[Any]) -> None:
        if not context.failures:
            return
        failures = [failure for item in context.failures for failure in item.failures]
        if not failures:
            return
        outcome = context.outcome
        is_poisoned = outcome is not None and outcome.kind == "poisoned"
        for failure in failures[:-1]:
            self._tracebacks.record(failure)
        last = failures[-1]
        # One traceback per failure: the poisoning one is logged at error, not also at warning.
        self._tracebacks.record(
            last, poisoning=is_poisoned and not isinstance(last, PermanentFailure)
        )
        if is_poisoned:
            poisoned(last)


def _is_power_of(number: int, base: int) -> bool:
    while number % base == 0 and number > 1:
        number //= base
    return number == 1


def _where(place: Place) -> str:
    _, filename, line = place
    return f"{filename}:{line}"


def _place(failure: BaseException) -> Place:
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


__all__ = ["FailureLogs", "FailureMemory", "TracebackLog", "handler_traceback", "poisoned"]
