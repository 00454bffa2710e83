"""The listener's observers, and fan-out of one item to all of them with per-observer isolation."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

import structlog
from reactivex import abc

T = TypeVar("T")

T_contra = TypeVar("T_contra", contravariant=True)

log = structlog.get_logger(__name__)


class BatchObserver(Protocol[T_contra]):
    """Takes a message's items all at once, to handle them in batches with other messages'."""

    def deliver(self, items: Sequence[T_contra], message_id: str) -> list[Exception | None]:
        """Handle ``items`` (blocking until done); for each, what it failed with, or None."""
        ...

    def close(self) -> None:
        """The listener has stopped: nothing more will be delivered."""
        ...


class Subscribers(Generic[T]):
    """A thread-safe set of observers that is completed once, when the listener stops."""

    def __init__(self) -> None:
        self._observers: list[abc.ObserverBase[T]] = []
        self._lock = threading.Lock()
        self.completed = False
        self.batches: BatchObserver[T] | None = None
        """The batch handler, when the listener has one (``deliver_all`` then)."""

    def add(self, observer: abc.ObserverBase[T]) -> Callable[[], None] | None:
        """Register an observer; return its remover, or None when already completed."""
        with self._lock:
            if self.completed:
                return None
            self._observers.append(observer)

        def remove() -> None:
            with self._lock:
                if observer in self._observers:
                    self._observers.remove(observer)

        return remove

    def __len__(self) -> int:
        with self._lock:
            return len(self._observers)

    def deliver(self, item: T) -> list[Exception]:
        """Give the item to every observer; return the failures (one never stops the rest).

        The caller settles the message by them; the ``FailureLogs`` and tracing middleware log
        them and mark the consumer span."""
        with self._lock:
            observers = list(self._observers)
        failures: list[Exception] = []
        for observer in observers:
            try:
                observer.on_next(item)
            except Exception as failure:
                failures.append(failure)
        return failures

    def deliver_all(self, items: Sequence[T], message_id: str) -> list[list[Exception]]:
        """Give a message's items to the batch handler at once, and each to every observer;
        the failures of each item."""
        batches = self.batches
        each: list[list[Exception]] = [[] for _ in items]
        if batches is not None:
            for failures, error in zip(each, batches.deliver(items, message_id), strict=True):
                if error is not None:
                    failures.append(error)
        if len(self):
            for failures, item in zip(each, items, strict=True):
                failures.extend(self.deliver(item))
        return each

    def complete(self) -> None:
        """Send on_completed to every observer, once."""
        with self._lock:
            if self.completed:
                return
            self.completed = True
            observers, self._observers = self._observers, []
        if self.batches is not None:
            self.batches.close()
        for observer in observers:
            try:
                observer.on_completed()
            except Exception:
                log.exception("observer_completion_failed", observer=_describe(observer))


def _describe(observer: object) -> str:
    # reactivex wraps subscriptions in an AutoDetachObserver; the callback inside names the handler.
    return repr(getattr(observer, "_on_next", observer))
