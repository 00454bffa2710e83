"""What ``run_until_drained`` keeps of a worker's handling: the items its handler finished and
the first exception it raised, for ``handle`` and for ``handle_batch``
(``cloudqueue.workers.testing``). A ``RetryLater`` is no failure there: the message comes back
after its delay, as in production, even with ``fail_fast``."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, cast

from cloudqueue.listener.consumer.item_failures import judged
from cloudqueue.listener.errors import BatchFailed, RetryLater

T = TypeVar("T")


class Recorder(Generic[T]):
    """Wraps a handler: keeps the items it finished and the first exception it raised."""

    def __init__(self, handler: Callable[[T], Any]) -> None:
        self._handler = handler
        self._lock = threading.Lock()
        self.handled: list[T] = []
        self.first_error: BaseException | None = None

    def __call__(self, item: T) -> None:
        try:
            self._handler(item)
        except Exception as error:
            self._failed(error)
            raise
        self._done([item])

    def _done(self, items: list[T]) -> None:
        with self._lock:
            self.handled += items

    def _failed(self, error: BaseException) -> None:
        if isinstance(judged(error), RetryLater):
            return  # asked to come back later: not a failure to raise in the test
        with self._lock:
            self.first_error = self.first_error or error


class BatchRecorder(Recorder[T]):
    """Wraps a batch handler (plain or ``async``): keeps the items of every call that returned,
    those a ``BatchFailed`` did not name, and the first exception a call raised."""

    def __init__(self, handler: Callable[[list[T]], Any]) -> None:
        super().__init__(cast(Callable[[T], Any], handler))
        self._batch_handler = handler

    def batch(self, items: list[T]) -> Any:
        try:
            result = self._batch_handler(items)
        except Exception as error:
            self._batch_failed(items, error)
            raise
        if inspect.isawaitable(result):
            return self._awaited(result, items)
        self._done(items)
        return None

    async def _awaited(self, result: Awaitable[Any], items: list[T]) -> None:
        try:
            await result
        except Exception as error:
            self._batch_failed(items, error)
            raise
        self._done(items)

    def _batch_failed(self, items: list[T], error: Exception) -> None:
        self._failed(error)
        if isinstance(error, BatchFailed):
            failed = set(error.failed)
            self._done([item for position, item in enumerate(items) if position not in failed])


__all__ = ["BatchRecorder", "Recorder"]
